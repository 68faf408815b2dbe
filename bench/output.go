package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// progress draws a bar on a terminal, a line per step elsewhere.
type progress struct {
	w          io.Writer
	total, n   int
	tty, drawn bool
}

func (p *progress) bar(text string) string {
	const width = 24
	fill := 0
	if p.total > 0 {
		fill = p.n * width / p.total
	}
	return fmt.Sprintf("[%s%s] %d/%d %s", strings.Repeat("=", fill), strings.Repeat(" ", width-fill), p.n, p.total, text)
}

func (p *progress) step(text string) {
	p.n++
	p.line(text)
}

func (p *progress) line(text string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.bar(text))
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "orrery bench: %s\n", p.bar(text))
}

func (p *progress) done() {
	if p.tty && p.drawn {
		fmt.Fprintf(p.w, "\r\033[K%s\n", p.bar("done"))
	}
}

// PrintTable prints one row per placement × pp × tg × concurrency: medians
// over its runs.
func PrintTable(w io.Writer, r *Report) {
	type key struct {
		placement    string
		pp, tg, conc int
	}
	groups := map[key][]Run{}
	var order []key
	for _, run := range r.Runs {
		k := key{run.Placement, run.PP, run.TG, run.Concurrency}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], run)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "placement\tplan\tpp\ttg\tconc\tprompt tok/s\tgen tok/s\tpredicted\tthroughput\tTTFT ms\tenergy J\tavg W\tpeak mem\truns\t")
	for _, k := range order {
		rs := groups[k]
		plan, pred := "–", "–"
		if p := rs[0].Predicted; p != nil {
			plan, pred = rs[0].Plan, fmt.Sprintf("%.1f", p.DecodeTokPerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t\n", k.placement, plan, k.pp, k.tg, k.conc,
			medianOf(rs, func(r Run) float64 { return r.PromptTPS }), medianOf(rs, func(r Run) float64 { return r.GenTPS }), pred,
			medianOf(rs, func(r Run) float64 { return r.GenThroughputTPS }), medianOf(rs, func(r Run) float64 { return r.TTFTMs }),
			optMedian(rs, func(r Run) *float64 { return r.EnergyJ }), optMedian(rs, func(r Run) *float64 { return r.AvgWatts }),
			HumanBytes(int64(peakOf(rs))), runsCell(rs))
	}
	tw.Flush()
	fmt.Fprintln(w, "(medians over the runs; predicted: the cost model's decode tok/s for the plan placed, – where no node has measured its speed; peak mem: the most any node of the placement used; energy and W are – where a node's power is unknown)")
}

func medianOf(rs []Run, f func(Run) float64) float64 {
	xs := make([]float64, 0, len(rs))
	for _, r := range rs {
		xs = append(xs, f(r))
	}
	return Median(xs)
}

// optMedian is the median of a value every run has, else "–".
func optMedian(rs []Run, f func(Run) *float64) string {
	var xs []float64
	for _, r := range rs {
		if v := f(r); v != nil {
			xs = append(xs, *v)
		}
	}
	if len(xs) < len(rs) || len(xs) == 0 {
		return "–"
	}
	return strconv.FormatFloat(Median(xs), 'f', 1, 64)
}

func peakOf(rs []Run) uint64 {
	var peak uint64
	for _, r := range rs {
		for _, m := range r.PeakMemory {
			peak = max(peak, m.InBytes)
		}
	}
	return peak
}

func runsCell(rs []Run) string {
	errs := 0
	for _, r := range rs {
		errs += len(r.Errors)
	}
	runs := strconv.Itoa(len(rs))
	if errs > 0 {
		runs += fmt.Sprintf(" (%d errors)", errs)
	}
	return runs
}

// Mean is the mean of xs, 0 for none.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// Median is the median of xs, 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
