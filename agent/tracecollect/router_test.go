package tracecollect

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// Trace messages reach the master's collector: from other members over a
// trace stream, from the master itself directly; other members' collectors
// get nothing.
func TestRouterShipsToTheMaster(t *testing.T) {
	testutil.CheckLeaks(t)
	nodes := clustertest.StartCluster(t, clustertest.Options{}, "a", "b", "c")
	saves := make([]*saved, len(nodes))
	cols := make([]*Collector, len(nodes))
	routers := make([]*Router, len(nodes))
	for i, n := range nodes {
		saves[i] = &saved{}
		cols[i] = New(Config{Timeout: time.Hour, Save: saves[i].save, Self: n.ID})
		routers[i] = NewRouter(n.Node, cols[i], nil)
		t.Cleanup(routers[i].Close)
	}
	testutil.WaitFor(t, "3 members everywhere", func() bool { return clustertest.Converged(nodes) })
	if m := nodes[0].Node.Master(); m != "a" {
		t.Fatalf("master %s, want the longest-running a", m)
	}
	ctx := context.Background()
	// Many chunks, more than any queue would hold: the stream paces them.
	const chunks = 600
	for i := range chunks {
		c := chunk(t, "t1", 2, i, i == chunks-1, span("c", int64(i), 1))
		if got, err := routers[2].Chunk(ctx, c); err != nil || got != "a" {
			t.Fatalf("chunk %d: master %q, %v", i, got, err)
		}
	}
	if got, err := routers[0].Chunk(ctx, chunk(t, "t1", 0, 0, true, span("a", 0, 1))); err != nil || got != "a" {
		t.Fatalf("master's own chunk: %q, %v", got, err)
	}
	announce := &wire.TraceTask{Task: "t1", Kind: "test", Ranks: []wire.TraceRank{{Rank: 0, Node: "a"}, {Rank: 2, Node: "c"}}}
	if got, err := routers[1].Task(ctx, announce); err != nil || got != "a" {
		t.Fatalf("announce from b: %q, %v", got, err)
	}
	if res := wait(t, cols[0], "t1"); res.Spans != chunks+1 || len(res.Missing) != 0 || res.Err != nil {
		t.Fatalf("merged %+v, want %d spans and no missing rank", res, chunks+1)
	}
	trs, _ := saves[0].get()
	fromC := 0
	for _, s := range trs[0].Spans {
		if s.Node == "c" && s.Rank == 2 {
			fromC++
		}
	}
	if fromC != chunks {
		t.Errorf("%d spans of c's rank 2, want %d", fromC, chunks)
	}
	bad := &wire.TraceChunk{Task: "../x", Data: []byte(`{}`)}
	if _, err := routers[1].Chunk(ctx, bad); err == nil {
		t.Error("an invalid chunk was shipped")
	}
	// The others' collectors got nothing: closing them saves nothing.
	for i := 1; i < len(nodes); i++ {
		cols[i].Close()
		if trs, _ := saves[i].get(); len(trs) != 0 {
			t.Errorf("%s (not master) collected %d traces", nodes[i].ID, len(trs))
		}
	}
	cols[0].Close()
}
