package ringbench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/ringbench"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// ranks records the ring ranks a node ran (Config.OnRank).
type ranks struct {
	mu  sync.Mutex
	got []string // "bench:hops:err"
}

func (r *ranks) onRank(start wire.RingStart) func(*wire.RingReport, error) {
	if start.NoTrace {
		return nil
	}
	return func(rep *wire.RingReport, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, fmt.Sprintf("%s:%d:%v", start.Bench, len(rep.Hops), err))
	}
}

func (r *ranks) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func TestRingBench(t *testing.T) {
	testutil.CheckLeaks(t)
	nodes := clustertest.StartCluster(t, clustertest.Options{}, "a", "b", "c")
	var benches []*ringbench.Bench
	hooks := make([]*ranks, len(nodes))
	for i, n := range nodes {
		hooks[i] = &ranks{}
		benches = append(benches, ringbench.New(ringbench.Config{Node: n.Node, OnRank: hooks[i].onRank}))
	}
	testutil.WaitFor(t, "3 members everywhere", func() bool { return clustertest.Converged(nodes) })
	testutil.WaitFor(t, "b probing both peers", func() bool { return len(nodes[1].Node.Links()) == 2 })
	res, err := benches[1].Run(context.Background(), 1<<20, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	// Every rank told OnRank about its 3 hops before the result came back
	// (the members report after their hook ran).
	for i, n := range nodes {
		if got := hooks[i].list(); len(got) != 1 || got[0] != res.Bench+":3:<nil>" {
			t.Errorf("%s: ring hook calls %v", n.ID, got)
		}
	}
	if len(res.Order) != 3 || res.Order[0] != "b" || len(res.Hops) != 3 || len(res.RoundMs) != 3 || len(res.Reports) != 3 {
		t.Fatalf("result = %+v", res)
	}
	want := map[string]string{"b": res.Order[1], res.Order[1]: res.Order[2], res.Order[2]: "b"}
	for _, h := range res.Hops {
		if want[h.From] != h.To || h.LatencyMsMin <= 0 || h.LatencyMsMin > h.LatencyMsAvg || h.LatencyMsAvg > h.LatencyMsMax || h.ThroughputMBps <= 0 {
			t.Errorf("hop %+v", h)
		}
	}
	if _, ok := res.ClockOffsets["a"]; !ok {
		t.Errorf("no clock offset for a: %v", res.ClockOffsets)
	}
	// Rank-link bytes are counted as Orrery traffic with each peer.
	var sent, recv uint64
	for _, l := range nodes[1].Node.Links() {
		sent, recv = max(sent, l.BytesSent), max(recv, l.BytesRecv)
	}
	if sent < 3<<20 || recv < 3<<20 {
		t.Errorf("largest per-peer counters: sent %d, received %d; want ≥ 3 MiB each", sent, recv)
	}
	// A second run works (ids do not collide; links are cleaned up).
	// NoTrace reaches the members: no hook call.
	if _, err := benches[0].Run(context.Background(), 1000, 1, true); err != nil {
		t.Errorf("second run: %v", err)
	}
	for i, n := range nodes {
		if got := hooks[i].list(); len(got) != 1 {
			t.Errorf("%s: untraced run called the ring hook: %v", n.ID, got)
		}
	}
	// Bad parameters are refused before anything is sent.
	if _, err := benches[0].Run(context.Background(), 0, 1, false); err == nil {
		t.Error("a 0-byte payload was accepted")
	}
}

// A member that does not run the benchmark (no handler) fails the run,
// which still names itself so that its trace can be accounted for.
func TestRingBenchMemberWithoutBench(t *testing.T) {
	testutil.CheckLeaks(t)
	nodes := clustertest.StartCluster(t, clustertest.Options{}, "a", "b")
	bench := ringbench.New(ringbench.Config{Node: nodes[0].Node})
	testutil.WaitFor(t, "2 members", func() bool { return clustertest.Converged(nodes) })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	res, err := bench.Run(ctx, 100, 1, false)
	if err == nil {
		t.Fatal("a run with a member that has no ring bench succeeded")
	}
	if res.Bench == "" || len(res.Order) != 2 {
		t.Errorf("failed run's result %+v does not name the run", res)
	}
}
