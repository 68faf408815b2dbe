package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent"
	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
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
	base, err := client.ParseBaseURL(*api)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --api %q: %v\n", name, *api, err)
		return 2
	}
	c := traceCmd{apiClient(base, traceTimeout)}
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
		reportAPIError(stderr, name, base, err)
		return 1
	}
	return 0
}

// traceTimeout bounds one request to the agent, a large export included.
const traceTimeout = 5 * time.Minute

// traceCmd runs the trace subcommands against one agent.
type traceCmd struct{ c *client.Client }

func (c traceCmd) ls(ctx context.Context, w io.Writer, asJSON bool) error {
	b, err := c.c.TracesJSON(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := w.Write(b)
		return err
	}
	var page api.TraceList
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

func humanBytes(n int64) string { return bench.HumanBytes(n) }

func (c traceCmd) stats(ctx context.Context, w io.Writer, id string, asJSON bool) error {
	b, err := c.c.TraceStatsJSON(ctx, id)
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
	return st.WriteText(w)
}

func (c traceCmd) export(ctx context.Context, stdout, stderr io.Writer, id, out string) error {
	body, err := c.c.TraceRaw(ctx, id)
	if err != nil {
		return err
	}
	defer body.Close()
	if out == "-" {
		if _, err := io.Copy(stdout, body); err != nil {
			return fmt.Errorf("read trace %s: %w", id, err)
		}
		return nil
	}
	var n int64
	if err := atomicfile.WriteFunc(out, 0o600, func(w io.Writer) error {
		var err error
		if n, err = io.Copy(w, body); err != nil {
			return fmt.Errorf("read trace %s: %w", id, err)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote trace %s to %s (%s)\n", id, out, humanBytes(n))
	return nil
}

func (c traceCmd) open(ctx context.Context, stdout, stderr io.Writer, id string) error {
	// Ask first, so that an unknown or bad id fails here with the agent's
	// message instead of in the browser.
	if _, err := c.c.Trace(ctx, id); err != nil {
		return err
	}
	page := c.c.PerfettoURL(id)
	if err := traceOpenURL(ctx, page); err != nil {
		fmt.Fprintf(stderr, "could not open a browser (%v); open this URL yourself:\n", err)
		fmt.Fprintln(stdout, page)
		return nil
	}
	fmt.Fprintf(stderr, "opened %s in the browser\n", page)
	return nil
}
