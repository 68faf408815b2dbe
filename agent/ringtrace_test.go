package agent

import (
	"bytes"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Node b's clock runs 50 ms ahead of a's. Uncorrected, b's receive would
// end before a sent; corrected by the probed offset, every flow goes
// forward in time.
func TestRingTraceCorrectsClockSkew(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC).UnixNano()
	ms := int64(time.Millisecond)
	skew := 50 * time.Millisecond
	res := cluster.RingResult{
		Bench: "ring-1", Order: []string{"a", "b"}, Size: 1 << 20, Rounds: 1,
		Reports: []*wire.RingReport{
			// a sends at 0..3 ms (ack at 3), receives b's payload 5..6 ms.
			{Bench: "ring-1", From: "a", To: "b", Hops: []wire.RingHop{{Round: 0, SendStartNs: t0, AckNs: t0 + 3*ms, RecvStartNs: t0 + 5*ms, RecvEndNs: t0 + 6*ms}}},
			// b (clock +50 ms) receives 1..2 ms, sends 2..6 ms (true times).
			{Bench: "ring-1", From: "b", To: "a", Hops: []wire.RingHop{{Round: 0,
				RecvStartNs: t0 + 1*ms + int64(skew), RecvEndNs: t0 + 2*ms + int64(skew),
				SendStartNs: t0 + 2*ms + int64(skew), AckNs: t0 + 6*ms + int64(skew)}}},
		},
		ClockOffsets: map[string]time.Duration{"b": skew},
	}
	st := state.New()
	st.NodeIdentities = map[string]state.NodeIdentity{"b": {NodeID: "b", FriendlyName: "studio"}}
	tr := ringTrace(res, st, state.NewMemoryHistory(0))
	if len(tr.Spans) != 4 {
		t.Fatalf("spans = %+v", tr.Spans)
	}
	for _, s := range tr.Spans {
		if s.StartNs < t0 || s.EndNs() > t0+6*ms {
			t.Errorf("span %s on %s at %d..%d ns after t0: not on a's clock", s.Name, s.Node, s.StartNs-t0, s.EndNs()-t0)
		}
	}
	if tr.Processes["b"] != "studio (b)" || tr.Processes["a"] != "a" {
		t.Errorf("processes = %v", tr.Processes)
	}
	var buf bytes.Buffer
	if err := trace.WriteChrome(&buf, tr); err != nil {
		t.Fatal(err)
	}
	back, err := trace.ReadChrome(&buf)
	if err != nil {
		t.Fatal(err)
	}
	sends := map[uint64]int64{}
	for _, s := range back.Spans {
		if id := s.Args.FlowOut(); id != 0 {
			sends[id] = s.StartNs
		}
	}
	flows := 0
	for _, s := range back.Spans {
		if id := s.Args.FlowIn(); id != 0 {
			flows++
			if start, ok := sends[id]; !ok || s.EndNs() < start {
				t.Errorf("flow %d: receive ends at %d, send started at %d (found %v)", id, s.EndNs()-t0, start-t0, ok)
			}
		}
	}
	if flows != 2 {
		t.Errorf("%d flows, want 2 (a→b, b→a)", flows)
	}
	if got := tr.Stats().ByRank; len(got) != 2 {
		t.Errorf("stats byRank = %v", got)
	}
}
