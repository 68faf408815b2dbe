package app

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// The fixtures are a 3-node `orrery demo`'s /state, /v1/traces and the
// chat trace's /stats.
func readFixture(t *testing.T, name string, v any) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return b
}

func fixtureSnapshot(t *testing.T) Snapshot {
	var snap Snapshot
	readFixture(t, "state.json", &snap.State)
	var tl struct{ Traces []tracestore.Meta }
	readFixture(t, "traces.json", &tl)
	snap.Traces = tl.Traces
	return snap
}

func TestStatusFromFixture(t *testing.T) {
	snap := fixtureSnapshot(t)
	var stats StepStats
	readFixture(t, "stats.json", &stats)
	snap.TokPerS, snap.HasTokPerS = stats.DecodeTokPerS()
	created := time.Date(2026, 12, 3, 11, 39, 30, 348902988, time.UTC)
	st := Summarize(snap, created.Add(2*time.Minute+5*time.Second))

	want := [NumLines]string{
		"Nodes: 3",
		"Memory: 1.7 GB / 75.8 GB used",
		"Runners: 3 Ready",
		"Latest trace: chat-1796297970082-72a30086 · 2m ago",
	}
	if got := st.Lines(); got != want {
		t.Errorf("lines:\n got %q\nwant %q", got, want)
	}
	if got := st.Title(); got != "3 nodes · 247 tok/s" {
		t.Errorf("title = %q", got)
	}
	if tip := st.Tooltip(); !strings.HasPrefix(tip, "Orrery: 3 nodes · 247 tok/s\nNodes: 3\n") {
		t.Errorf("tooltip = %q", tip)
	}
}

func TestDecodeTokPerS(t *testing.T) {
	var stats StepStats
	readFixture(t, "stats.json", &stats)
	// Rank 0's 47 decode steps take 190 593 µs: each spans the whole
	// pipeline's work on its token (the runner reported 243 tok/s).
	got, ok := stats.DecodeTokPerS()
	if want := 47 * 1e6 / 190593.0; !ok || got < want-1e-9 || got > want+1e-9 {
		t.Errorf("DecodeTokPerS = %v, %v; want %v", got, ok, want)
	}
	// Without rank stats: all ranks' steps over the rank count.
	stats.ByRank = map[string]trace.RankStats{"0": {}, "1": {}, "2": {}}
	want := 47 * 1e6 / 285880.0
	if got, ok := stats.DecodeTokPerS(); !ok || got < want-1e-9 || got > want+1e-9 {
		t.Errorf("fallback DecodeTokPerS = %v, %v; want %v", got, ok, want)
	}
	if _, ok := (StepStats{}).DecodeTokPerS(); ok {
		t.Error("a trace without decode steps has a speed")
	}
}

func TestStatusOffline(t *testing.T) {
	st := Summarize(Snapshot{Err: errors.New("connection refused")}, time.Now())
	if st.Title() != "Orrery · offline" {
		t.Errorf("title = %q", st.Title())
	}
	if l := st.Lines(); !strings.Contains(l[0], "unreachable") || !strings.HasPrefix(l[1], "Memory:") {
		t.Errorf("lines = %q", l)
	}
}

func TestStatusPartialAndEmpty(t *testing.T) {
	total := state.Bytes(16e9)
	snap := Snapshot{State: state.State{
		NodeIdentities: map[string]state.NodeIdentity{"a": {}, "b": {}},
		NodeMemory: map[string]state.NodeMemory{
			"a": {RAMTotal: total, RAMAvailable: state.Bytes(12e9)},
			"b": {RAMTotal: total}, // available unknown: left out, not taken as 0
		},
		Runners: map[string]state.Runner{
			"r0": {Status: "Loading"}, "r1": {Status: "Ready"}, "r2": {Status: "Ready"},
		},
	}}
	st := Summarize(snap, time.Now())
	l := st.Lines()
	if l[1] != "Memory: 4.0 GB / 16.0 GB used (1 of 2 nodes)" {
		t.Errorf("memory line = %q", l[1])
	}
	if l[2] != "Runners: 1 Loading, 2 Ready" {
		t.Errorf("runners line = %q", l[2])
	}
	if l[3] != "Latest trace: none" || st.HasTrace {
		t.Errorf("trace line = %q", l[3])
	}
	if st.Title() != "2 nodes" {
		t.Errorf("title = %q (no tok/s without a chat trace)", st.Title())
	}
	snap.TracesErr = errors.New("master unreachable")
	if l := Summarize(snap, time.Now()).Lines(); l[3] != "Latest trace: unavailable" {
		t.Errorf("trace line without a list = %q", l[3])
	}
	one := Summarize(Snapshot{State: state.State{NodeIdentities: map[string]state.NodeIdentity{"a": {}}}}, time.Now())
	if one.Title() != "1 node" || one.Lines()[1] != "Memory: not reported" || one.Lines()[2] != "Runners: none" {
		t.Errorf("one node: %q %q", one.Title(), one.Lines())
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s ago", 12 * time.Second: "12s ago", 5 * time.Minute: "5m ago",
		3 * time.Hour: "3h ago", 72 * time.Hour: "3d ago",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}
