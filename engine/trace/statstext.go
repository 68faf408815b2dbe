package trace

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText writes the stats as tables for a terminal, in milliseconds:
// the wall time, the categories (largest total first), each rank's
// categories (ranks in numeric order), and each rank's compute/comms
// share. The JSON form is the Stats value itself.
func (st Stats) WriteText(out io.Writer) error {
	w := &stickyWriter{w: out}
	st.writeText(w)
	return w.err
}

func (st Stats) writeText(w io.Writer) {
	fmt.Fprintf(w, "trace %s: wall time %s ms\n\n", st.TaskID, ms(float64(st.TotalWallTimeUs)))
	if len(st.ByCategory) == 0 {
		fmt.Fprintln(w, "no spans")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "category\ttotal ms\tcount\tmin ms\tavg ms\tmax ms\t")
	for _, cat := range sortedCategories(st.ByCategory) {
		writeCategoryRow(tw, "", cat, st.ByCategory[cat])
	}
	tw.Flush()

	ranks := make([]string, 0, len(st.ByRank))
	for r := range st.ByRank {
		ranks = append(ranks, r)
	}
	slices.SortFunc(ranks, func(a, b string) int {
		ai, aerr := strconv.Atoi(a)
		bi, berr := strconv.Atoi(b)
		if aerr == nil && berr == nil {
			return cmp.Compare(ai, bi)
		}
		return strings.Compare(a, b)
	})
	if len(ranks) == 0 {
		return
	}
	fmt.Fprintln(w, "\nper rank:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tcategory\ttotal ms\tcount\tmin ms\tavg ms\tmax ms\t")
	for _, r := range ranks {
		cats := st.ByRank[r].ByCategory
		for _, cat := range sortedCategories(cats) {
			writeCategoryRow(tw, r+"\t", cat, cats[cat])
		}
	}
	tw.Flush()

	if len(st.ByRankShare) > 0 {
		fmt.Fprintln(w, "\ncompute / comms per rank:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "rank\tcompute ms\tcomms ms\tcompute %\tcomms %\t")
		for _, r := range ranks {
			sh, ok := st.ByRankShare[r]
			if !ok {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t\n", r, ms(float64(sh.ComputeUs)), ms(float64(sh.CommsUs)),
				100*sh.ComputeShare, 100*sh.CommsShare)
		}
		tw.Flush()
	}
}

func writeCategoryRow(tw io.Writer, prefix, cat string, c CategoryStats) {
	fmt.Fprintf(tw, "%s%s\t%s\t%d\t%s\t%s\t%s\t\n", prefix, cat, ms(float64(c.TotalUs)), c.Count,
		ms(float64(c.MinUs)), ms(c.AvgUs), ms(float64(c.MaxUs)))
}

// sortedCategories orders categories by total time, largest first.
func sortedCategories(m map[string]CategoryStats) []string {
	cats := make([]string, 0, len(m))
	for c := range m {
		cats = append(cats, c)
	}
	slices.SortFunc(cats, func(a, b string) int {
		if c := cmp.Compare(m[b].TotalUs, m[a].TotalUs); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return cats
}

func ms(us float64) string { return strconv.FormatFloat(us/1000, 'f', 3, 64) }

// stickyWriter keeps the first write error, so that the tables can be
// written without checking each line.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}
