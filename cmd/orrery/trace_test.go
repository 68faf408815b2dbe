package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent"
	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/engine/trace/tracetest"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// traceAgent serves the API with a real trace store holding "bench-1"
// (older, 4 ranks) and "bench-2" (newer, 2 ranks).
func traceAgent(t *testing.T) (string, map[string]*trace.Trace) {
	t.Helper()
	ts, err := tracestore.Open(tracestore.Config{Dir: filepath.Join(t.TempDir(), "traces")})
	if err != nil {
		t.Fatal(err)
	}
	traces := map[string]*trace.Trace{}
	now := time.Now().UTC()
	for i, c := range []struct {
		id           string
		spans, ranks int
	}{{"bench-1", 200, 4}, {"bench-2", 50, 2}} {
		tr := tracetest.Pipeline(tracetest.PipelineConfig{Spans: c.spans, Ranks: c.ranks, Flows: true})
		tr.TaskID = c.id
		if _, err := ts.Save(tracestore.Meta{TaskID: c.id, CreatedAt: now.Add(time.Duration(i-2) * time.Minute),
			Spans: len(tr.Spans), Nodes: len(tr.Processes), Kind: "ring-bench"},
			func(w io.Writer) error { return trace.WriteChrome(w, tr) }); err != nil {
			t.Fatal(err)
		}
		traces[c.id] = tr
	}
	srv := httptest.NewServer((&api.Server{NodeID: "node-test", Version: "test", Logger: slog.New(slog.DiscardHandler), Traces: ts}).Handler())
	t.Cleanup(srv.Close)
	return srv.URL, traces
}

func runTraceCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runTrace(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestTraceLs(t *testing.T) {
	base, _ := traceAgent(t)
	code, out, errs := runTraceCmd(t, "ls", "--api", base)
	if code != 0 {
		t.Fatalf("trace ls = %d, stderr %s", code, errs)
	}
	i1, i2 := strings.Index(out, "bench-1"), strings.Index(out, "bench-2")
	if i1 < 0 || i2 < 0 || i2 > i1 {
		t.Errorf("trace ls does not list bench-2 then bench-1:\n%s", out)
	}
	if !strings.Contains(out, "ID") || !strings.Contains(out, "ring-bench") {
		t.Errorf("trace ls output lacks the header or kind:\n%s", out)
	}
	// Through main's dispatch, with --json.
	var o, e bytes.Buffer
	if code := run([]string{"trace", "ls", "--json", "--api", base}, &o, &e); code != 0 || !strings.Contains(o.String(), `"taskId":"bench-2"`) {
		t.Errorf("orrery trace ls --json = %d %s %s", code, o.String(), e.String())
	}
}

func TestTraceStatsCmd(t *testing.T) {
	base, traces := traceAgent(t)
	// Flags after the id work too.
	code, out, errs := runTraceCmd(t, "stats", "bench-1", "--api", base)
	if code != 0 {
		t.Fatalf("trace stats = %d, stderr %s", code, errs)
	}
	st := trace.ComputeStats(traces["bench-1"].Spans)
	wantWall := "wall time " + ms(float64(st.TotalWallTimeUs)) + " ms"
	if !strings.Contains(out, "trace bench-1: "+wantWall) {
		t.Errorf("stats output lacks %q:\n%s", wantWall, out)
	}
	c := st.ByCategory["decode/comms"]
	if c.Count == 0 {
		t.Fatalf("fixture has no decode/comms spans: %+v", st.ByCategory)
	}
	var row string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "decode/comms" {
			row = line
		}
	}
	want := []string{"decode/comms", ms(float64(c.TotalUs)), itoa(c.Count), ms(float64(c.MinUs)), ms(c.AvgUs), ms(float64(c.MaxUs))}
	if got := strings.Fields(row); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("decode/comms row = %q, want fields %v\n%s", row, want, out)
	}
	for _, s := range []string{"category", "total ms", "count", "min ms", "avg ms", "max ms", "per rank:", "compute / comms per rank:"} {
		if !strings.Contains(out, s) {
			t.Errorf("stats output lacks %q:\n%s", s, out)
		}
	}
	// A rank row: rank 3's decode/compute.
	rc := st.ByRank["3"].ByCategory["decode/compute"]
	found := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 7 && f[0] == "3" && f[1] == "decode/compute" && f[2] == ms(float64(rc.TotalUs)) && f[3] == itoa(rc.Count) {
			found = true
		}
	}
	if !found {
		t.Errorf("no rank 3 decode/compute row (%v ms, %d):\n%s", ms(float64(rc.TotalUs)), rc.Count, out)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestTraceExport(t *testing.T) {
	base, traces := traceAgent(t)
	out := filepath.Join(t.TempDir(), "bench-2.json")
	code, _, errs := runTraceCmd(t, "export", "--api", base, "-o", out, "bench-2")
	if code != 0 {
		t.Fatalf("trace export = %d, stderr %s", code, errs)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := trace.ReadChrome(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(back.Spans), len(traces["bench-2"].Spans); got != want {
		t.Errorf("exported file loads %d spans, want %d", got, want)
	}
	// -o - writes to stdout.
	code, stdout, _ := runTraceCmd(t, "export", "--api", base, "-o", "-", "bench-2")
	if code != 0 || !strings.Contains(stdout, "traceEvents") {
		t.Errorf("export -o - = %d, %.100s", code, stdout)
	}
	// An unknown id leaves no file behind.
	missing := filepath.Join(filepath.Dir(out), "missing.json")
	if code, _, errs := runTraceCmd(t, "export", "--api", base, "-o", missing, "nope"); code != 1 || !strings.Contains(errs, "no such trace") {
		t.Errorf("export unknown = %d %s", code, errs)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 1 {
		t.Errorf("files after a failed export: %v", entries)
	}
}

func TestTraceBadID(t *testing.T) {
	base, _ := traceAgent(t)
	for _, sub := range []string{"stats", "export", "open"} {
		args := []string{sub, "--api", base}
		if sub == "export" {
			args = append(args, "-o", filepath.Join(t.TempDir(), "x.json"))
		}
		for _, id := range []string{"../../etc/passwd", "a.b", "é", strings.Repeat("x", 65)} {
			code, out, errs := runTraceCmd(t, append(args, id)...)
			if code != 1 {
				t.Errorf("trace %s %q = %d, want 1 (stderr %s)", sub, id, code, errs)
			}
			// The agent's own message: ident.ValidTraceID's text.
			if !strings.Contains(errs, "invalid id: trace id") || !strings.Contains(errs, "400") {
				t.Errorf("trace %s %q: stderr %q lacks the agent's 400 error", sub, id, errs)
			}
			if out != "" {
				t.Errorf("trace %s %q printed %q", sub, id, out)
			}
		}
	}
	if code, _, errs := runTraceCmd(t, "stats", "--api", base, "nope"); code != 1 || !strings.Contains(errs, "404") || !strings.Contains(errs, "no such trace") {
		t.Errorf("stats unknown id = %d %s", code, errs)
	}
}

func TestTraceOpen(t *testing.T) {
	base, _ := traceAgent(t)
	var opened []string
	traceOpenURL = func(_ context.Context, u string) error { opened = append(opened, u); return nil }
	t.Cleanup(func() { traceOpenURL = agent.OpenInBrowser })
	code, out, errs := runTraceCmd(t, "open", "--api", base, "bench-1")
	if code != 0 || len(opened) != 1 || opened[0] != base+"/perfetto/bench-1" {
		t.Errorf("trace open = %d, opened %v, stdout %q, stderr %q", code, opened, out, errs)
	}
	// No browser: the URL is printed instead.
	traceOpenURL = func(context.Context, string) error { return errors.New("no xdg-open") }
	code, out, errs = runTraceCmd(t, "open", "--api", base, "bench-1")
	if code != 0 || strings.TrimSpace(out) != base+"/perfetto/bench-1" || !strings.Contains(errs, "no xdg-open") {
		t.Errorf("trace open without a browser = %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestTraceUsage(t *testing.T) {
	for _, args := range [][]string{
		{}, {"bogus"}, {"ls", "extra"}, {"stats"}, {"stats", "a", "b"}, {"export", "a"}, {"open"}, {"ls", "--nope"},
		{"ls", "--api", "ftp://x"},
	} {
		if code, _, _ := runTraceCmd(t, args...); code != 2 {
			t.Errorf("trace %q = %d, want 2", args, code)
		}
	}
	// No agent listening: exit 1 with a hint.
	code, _, errs := runTraceCmd(t, "ls", "--api", "http://127.0.0.1:1")
	if code != 1 || !strings.Contains(errs, "no agent answers") {
		t.Errorf("ls without an agent = %d %q", code, errs)
	}
}

// POST /v1/traces/{id}/open on a real agent runs the system opener
// (xdg-open here; a script on $PATH records what it was given).
func TestTraceOpenEndpointRunsOpener(t *testing.T) {
	bin := buildBinary(t)
	dataDir := t.TempDir()
	ts, err := tracestore.Open(tracestore.Config{Dir: filepath.Join(dataDir, "traces")})
	if err != nil {
		t.Fatal(err)
	}
	tr := tracetest.Pipeline(tracetest.PipelineConfig{Spans: 20, Ranks: 2, Flows: true})
	tr.TaskID = "opened-1"
	if _, err := ts.Save(tracestore.Meta{TaskID: tr.TaskID, Spans: len(tr.Spans)}, func(w io.Writer) error { return trace.WriteChrome(w, tr) }); err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	record := filepath.Join(fake, "opened.txt")
	script := "#!/bin/sh\nprintf '%s\\n' \"$1\" >> " + record + "\n"
	if err := os.WriteFile(filepath.Join(fake, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startAgentEnv(t, bin, testutil.FreeAddr(t), dataDir, []string{"PATH=" + fake + ":" + os.Getenv("PATH")})
	waitHealthy(t, p)
	code, b, err := p.post("/v1/traces/opened-1/open", "")
	if err != nil || code != 200 {
		t.Fatalf("POST open = %d %s %v", code, b, err)
	}
	got, err := os.ReadFile(record)
	if want := "http://" + p.addr + "/perfetto/opened-1\n"; err != nil || string(got) != want {
		t.Errorf("xdg-open got %q (%v), want %q", got, err, want)
	}
	if code, b, _ := p.post("/v1/traces/missing/open", ""); code != 404 {
		t.Errorf("open of a missing trace = %d %s", code, b)
	}
}

// ms formats microseconds as trace.Stats.WriteText does.
func ms(us float64) string { return strconv.FormatFloat(us/1000, 'f', 3, 64) }
