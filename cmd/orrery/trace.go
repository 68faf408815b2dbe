package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/engine/trace"
)

const traceUsage = `Usage:
  orrery trace ls [--api URL] [--json]               list the agent's traces, newest first
  orrery trace stats [--api URL] [--json] ID         print a trace's time per category and per rank
  orrery trace export [--api URL] -o FILE ID         save a trace as Chrome-trace JSON (-o - for stdout)
  orrery trace open [--api URL] ID                   open a trace in Perfetto (ui.perfetto.dev) in the browser

--api is the agent's API URL (default http://127.0.0.1:52416).
`

// traceOpenURL opens url in the system browser; tests replace it.
var traceOpenURL = agent.OpenInBrowser

// runTrace runs "orrery trace …". Exit status: 0 done, 1 failed, 2 usage.
func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, traceUsage)
		return 2
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, traceUsage)
		return 0
	case "ls", "stats", "export", "open":
	default:
		fmt.Fprintf(stderr, "orrery trace: unknown subcommand %q\n\n%s", sub, traceUsage)
		return 2
	}
	name := "orrery trace " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, traceUsage) }
	api := fs.String("api", "http://127.0.0.1:52416", "API URL of the agent")
	asJSON := false
	out := ""
	switch sub {
	case "ls", "stats":
		fs.BoolVar(&asJSON, "json", false, "print the raw JSON")
	case "export":
		fs.StringVar(&out, "o", "", "output file (- for stdout)")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	wantArgs := 1
	if sub == "ls" {
		wantArgs = 0
	}
	if len(pos) != wantArgs {
		if wantArgs == 0 {
			fmt.Fprintf(stderr, "%s: unexpected argument %q\n", name, pos[0])
		} else {
			fmt.Fprintf(stderr, "%s: want one trace id, got %d arguments\n\n%s", name, len(pos), traceUsage)
		}
		return 2
	}
	if sub == "export" && out == "" {
		fmt.Fprintf(stderr, "%s: -o FILE is required (- for stdout)\n", name)
		return 2
	}
	base, err := doctorBaseURL(*api)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --api %q: %v\n", name, *api, err)
		return 2
	}
	c := &traceClient{base: base, http: &http.Client{Timeout: 5 * time.Minute}}
	var id string
	if wantArgs == 1 {
		id = pos[0]
		// "." and ".." would be cleaned out of the URL path and ask the
		// agent something else; every other id goes to the agent as is,
		// which validates it.
		if id == "." || id == ".." || id == "" {
			fmt.Fprintf(stderr, "%s: bad trace id %q: want 1..64 of [A-Za-z0-9_-]\n", name, id)
			return 1
		}
	}
	switch sub {
	case "ls":
		err = c.ls(ctx, stdout, asJSON)
	case "stats":
		err = c.stats(ctx, stdout, id, asJSON)
	case "export":
		err = c.export(ctx, stdout, stderr, id, out)
	case "open":
		err = c.open(ctx, stdout, stderr, id)
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "%s: no agent answers at %s: %v — start one with `orrery agent`\n", name, base, ue.Err)
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		return 1
	}
	return 0
}

type traceClient struct {
	base string
	http *http.Client
}

func tracePath(id string, suffix string) string {
	return "/v1/traces/" + url.PathEscape(id) + suffix
}

// get GETs path and returns a 200 answer, whose body the caller closes;
// anything else is an *apiError carrying the agent's message.
func (c *traceClient) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, apiMaxResponse))
		return nil, apiErrorOf(http.MethodGet, c.base+path, resp.StatusCode, b)
	}
	return resp, nil
}

// getJSON returns the body of a 200 answer to GET path.
func (c *traceClient) getJSON(ctx context.Context, path string, limit int64) ([]byte, error) {
	resp, err := c.get(ctx, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", c.base+path, err)
	}
	return b, nil
}

func (c *traceClient) ls(ctx context.Context, w io.Writer, asJSON bool) error {
	b, err := c.getJSON(ctx, "/v1/traces", 64<<20)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := w.Write(b)
		return err
	}
	var page struct {
		Traces []tracestore.Meta `json:"traces"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		return fmt.Errorf("decode trace list: %w", err)
	}
	if len(page.Traces) == 0 {
		fmt.Fprintln(w, "no traces")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tSIZE\tSPANS\tNODES\tKIND\tNOTE")
	for _, m := range page.Traces {
		note := ""
		if m.Partial {
			note = "partial"
			if len(m.MissingRanks) > 0 {
				note += fmt.Sprintf(" (missing ranks %v)", m.MissingRanks)
			}
		}
		kind := m.Kind
		if kind == "" {
			kind = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", m.TaskID, m.CreatedAt.Local().Format("2006-01-02 15:04:05"),
			humanBytes(m.FileSize), m.Spans, m.Nodes, kind, note)
	}
	return tw.Flush()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (c *traceClient) stats(ctx context.Context, w io.Writer, id string, asJSON bool) error {
	b, err := c.getJSON(ctx, tracePath(id, "/stats"), 64<<20)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := w.Write(b)
		return err
	}
	var st trace.Stats
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("decode stats: %w", err)
	}
	if st.TaskID == "" {
		st.TaskID = id
	}
	printTraceStats(w, st)
	return nil
}

// printTraceStats writes the wall time, the categories and each rank's
// categories as tables, in milliseconds.
func printTraceStats(w io.Writer, st trace.Stats) {
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

func writeCategoryRow(tw io.Writer, prefix, cat string, c trace.CategoryStats) {
	fmt.Fprintf(tw, "%s%s\t%s\t%d\t%s\t%s\t%s\t\n", prefix, cat, ms(float64(c.TotalUs)), c.Count,
		ms(float64(c.MinUs)), ms(c.AvgUs), ms(float64(c.MaxUs)))
}

// sortedCategories orders categories by total time, largest first.
func sortedCategories(m map[string]trace.CategoryStats) []string {
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

func (c *traceClient) export(ctx context.Context, stdout, stderr io.Writer, id, out string) error {
	resp, err := c.get(ctx, tracePath(id, "/raw"))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == "-" {
		if _, err := io.Copy(stdout, resp.Body); err != nil {
			return fmt.Errorf("read trace %s: %w", id, err)
		}
		return nil
	}
	var n int64
	if err := writeAtomic(out, func(w io.Writer) error {
		var err error
		if n, err = io.Copy(w, resp.Body); err != nil {
			return fmt.Errorf("read trace %s: %w", id, err)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote trace %s to %s (%s)\n", id, out, humanBytes(n))
	return nil
}

func (c *traceClient) open(ctx context.Context, stdout, stderr io.Writer, id string) error {
	// Ask first, so that an unknown or bad id fails here with the agent's
	// message instead of in the browser.
	if _, err := c.getJSON(ctx, tracePath(id, ""), 1<<20); err != nil {
		return err
	}
	page := c.base + "/perfetto/" + url.PathEscape(id)
	if err := traceOpenURL(ctx, page); err != nil {
		fmt.Fprintf(stderr, "could not open a browser (%v); open this URL yourself:\n", err)
		fmt.Fprintln(stdout, page)
		return nil
	}
	fmt.Fprintf(stderr, "opened %s in the browser\n", page)
	return nil
}

// writeAtomic writes path through fill into a temp file beside it, renamed
// into place only when fill and the close succeed, so that a failure never
// leaves a truncated file behind. fill's error is returned as it is.
func writeAtomic(path string, fill func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := fill(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
