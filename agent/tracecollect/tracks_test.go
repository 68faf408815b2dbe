package tracecollect

import (
	"math"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// A runner's samples of its link's sent bytes become exact MB/s values
// per interval, 0 at the end; send spans a bytes-sent-so-far track; other
// counters stay as they were.
func TestLinkTracks(t *testing.T) {
	ms := int64(time.Millisecond)
	cs := []trace.CounterSample{
		{Name: runnerapi.LinkCounter(2), Unit: "bytes", TsNs: 200 * ms, Value: 3000},
		{Name: runnerapi.LinkCounter(2), Unit: "bytes", TsNs: 0, Value: 1000},
		{Name: runnerapi.LinkCounter(2), Unit: "bytes", TsNs: 100 * ms, Value: 1000},
		{Name: runnerapi.LinkCounter(7), Unit: "bytes", TsNs: 0, Value: 5}, // no such rank: dropped
		{Name: "other", Unit: "x", TsNs: 5, Value: 1},
	}
	spans := []trace.Span{
		{Name: "compute", Cat: "compute", StartNs: 10 * ms, DurNs: ms},
		{Name: "send → rank 2", Cat: "send", StartNs: 150 * ms, DurNs: ms, Args: trace.Send(2, 1500, 1)},
		{Name: "send → rank 2", Cat: "send", StartNs: 120 * ms, DurNs: ms, Args: trace.Send(2, 500, 2)},
		{Name: "recv", Cat: "recv", StartNs: 130 * ms, DurNs: ms, Args: trace.Recv(0, 99, 3)},
	}
	nodeOf := func(r int) string {
		if r == 2 {
			return "B"
		}
		return ""
	}
	got := linkTracks("A", cs, spans, nodeOf)
	var mbps, sent []trace.CounterSample
	other := 0
	for _, c := range got {
		switch {
		case c.Name == "link A→B" && c.Unit == "MB/s":
			mbps = append(mbps, c)
		case c.Name == "link A→B" && c.Unit == SentUnit:
			sent = append(sent, c)
		case c.Name == "other":
			other++
		default:
			t.Errorf("unexpected sample %+v", c)
		}
	}
	// 0 B over the first 100 ms, 2000 B over the next: 0.02 MB/s; then 0.
	want := []struct {
		ts int64
		v  float64
	}{{0, 0}, {100 * ms, 0.02}, {200 * ms, 0}}
	if len(mbps) != 3 || other != 1 {
		t.Fatalf("MB/s samples %+v, other %d", mbps, other)
	}
	for i, w := range want {
		if mbps[i].TsNs != w.ts || math.Abs(mbps[i].Value-w.v) > 1e-12 || mbps[i].Node != "A" {
			t.Errorf("MB/s sample %d = %+v, want %v at %d", i, mbps[i], w.v, w.ts)
		}
	}
	// From 0 at the first span, then at each send's end, in time order.
	if len(sent) != 3 || sent[0].TsNs != 10*ms || sent[0].Value != 0 || sent[1].TsNs != 121*ms || sent[1].Value != 500 ||
		sent[2].TsNs != 151*ms || sent[2].Value != 2000 {
		t.Fatalf("bytes sent %+v", sent)
	}
}

// Link tracks are named by their other end, on whichever node measured
// them.
func TestNameLinks(t *testing.T) {
	cs := []trace.CounterSample{{Node: "A", Name: "link A→B"}, {Node: "B", Name: "link A→B"}, {Node: "A", Name: "memory"}}
	nameLinks(cs, func(id string) string { return "n" + id })
	if cs[0].Name != "link → nB" || cs[1].Name != "link ← nA" || cs[2].Name != "memory" {
		t.Fatalf("%+v", cs)
	}
}

// Memory: every sample within the task plus its start and end, holding
// the value sampled last before them; "whole machine" for nodes that
// share one.
func TestMemoryCounters(t *testing.T) {
	hist := state.NewMemoryHistory(time.Hour)
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	for i, used := range []uint64{100, 200, 300, 400} { // at 0, 0.5, 1.0, 1.5 s
		total := uint64(1000)
		hist.Add("A", state.NodeMemory{SampledAt: base.Add(time.Duration(i) * 500 * time.Millisecond),
			RAMTotal: state.Bytes(total), RAMAvailable: state.Bytes(total - used)})
	}
	first, last := base.Add(700*time.Millisecond).UnixNano(), base.Add(1200*time.Millisecond).UnixNano()
	st := state.State{NodeIdentities: map[string]state.NodeIdentity{
		"A": {FriendlyName: "vm", ChipID: "x", RAMTotal: state.Bytes(1000)},
		"B": {FriendlyName: "vm", ChipID: "x", RAMTotal: state.Bytes(1000)},
		"C": {FriendlyName: "mac", ChipID: "x", RAMTotal: state.Bytes(1000)},
	}}
	nodes := map[string]bool{"A": true, "C": true}
	if s := sharedMachines(st, map[string]bool{"A": true, "B": true, "C": true}); !s["A"] || !s["B"] || s["C"] {
		t.Fatalf("shared %v", s)
	}
	got := memoryCounters(hist, nodes, map[string]bool{"A": true}, nil, first, last)
	want := []struct {
		ts int64
		v  float64
	}{{first, 200}, {base.Add(time.Second).UnixNano(), 300}, {last, 300}}
	if len(got) != len(want) {
		t.Fatalf("samples %+v", got)
	}
	for i, w := range want {
		if got[i].TsNs != w.ts || got[i].Value != w.v || got[i].Name != WholeMachineTrack {
			t.Errorf("sample %d = %+v, want %v at %d", i, got[i], w.v, w.ts)
		}
	}
}
