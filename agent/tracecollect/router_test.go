package tracecollect

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
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
		routers[i] = NewRouter(n.Node, cols[i], time.Minute, nil)
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

// The master dies after the ranks shipped a task's trace to it: on the
// master change every node sends its part again, and the new master
// merges the whole trace.
func TestRouterResendsToANewMaster(t *testing.T) {
	testutil.CheckLeaks(t)
	nodes := clustertest.StartCluster(t, clustertest.Options{}, "a", "b", "c")
	cols := make([]*Collector, len(nodes))
	routers := make([]*Router, len(nodes))
	saves := make([]*saved, len(nodes))
	for i, n := range nodes {
		saves[i] = &saved{}
		cols[i] = New(Config{Timeout: time.Hour, Save: saves[i].save, Self: n.ID})
		routers[i] = NewRouter(n.Node, cols[i], time.Minute, nil)
		t.Cleanup(routers[i].Close)
		t.Cleanup(cols[i].Close)
	}
	testutil.WaitFor(t, "3 members everywhere", func() bool { return clustertest.Converged(nodes) })
	ctx := context.Background()
	if _, err := routers[2].Chunk(ctx, chunk(t, "t2", 1, 0, true, span("c", 5, 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := routers[1].Chunk(ctx, chunk(t, "t2", 0, 0, true, span("b", 1, 1))); err != nil {
		t.Fatal(err)
	}
	announce := &wire.TraceTask{Task: "t2", Kind: "test", Ranks: []wire.TraceRank{{Rank: 0, Node: "b"}, {Rank: 1, Node: "c"}}}
	if got, err := routers[1].Task(ctx, announce); err != nil || got != "a" {
		t.Fatalf("announce: master %q, %v", got, err)
	}
	nodes[0].Stop(t) // a dies with the trace in memory
	testutil.WaitFor(t, "b is the master of b and c", func() bool {
		return nodes[1].Node.Master() == "b" && nodes[2].Node.Master() == "b"
	})
	routers[2].Resend(ctx)
	routers[1].Resend(ctx)
	if res := wait(t, cols[1], "t2"); res.Spans != 2 || len(res.Missing) != 0 || res.Err != nil {
		t.Fatalf("merged on the new master: %+v, want 2 spans and no missing rank", res)
	}
	// Sent again only once: a second Resend to the same master sends
	// nothing (the collector would refuse a second announcement).
	routers[1].Resend(ctx)
	if trs, _ := saves[1].get(); len(trs) != 1 {
		t.Errorf("%d traces saved on b, want 1", len(trs))
	}
}

// masterLater is a node that becomes the master at a given time.
type masterLater struct {
	id, other string
	at        time.Time
}

func (m *masterLater) ID() string { return m.id }
func (m *masterLater) Master() string {
	if time.Now().After(m.at) {
		return m.id
	}
	return m.other
}
func (m *masterLater) DialStream(context.Context, string, cluster.Purpose, string) (net.Conn, error) {
	return nil, errors.New("no dialling here")
}
func (m *masterLater) HandleStream(cluster.Purpose, cluster.StreamHandler) {}

// A node that the others already follow, but that does not count itself
// as master yet (a few ticks after an election), keeps what they send it
// once it does; a node that does not become master drops it.
func TestRouterKeepsMessagesSentJustBeforeItBecameMaster(t *testing.T) {
	testutil.CheckLeaks(t)
	for _, tc := range []struct {
		after time.Duration
		want  bool
	}{{200 * time.Millisecond, true}, {masterWait + time.Second, false}} {
		node := &masterLater{id: "b", other: "a", at: time.Now().Add(tc.after)}
		s := &saved{}
		col := New(Config{Timeout: time.Hour, Save: s.save, Self: "b"})
		r := NewRouter(node, col, time.Minute, nil)
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() { r.serve(context.Background(), "c", "", b); close(done) }()
		typ, payload, err := wire.Encode(chunk(t, "t1", 0, 0, true, span("c", 0, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.WriteFrame(a, typ, payload); err != nil {
			t.Fatal(err)
		}
		typ, payload, _ = wire.Encode(&wire.TraceTask{Task: "t1", Kind: "test", Ranks: []wire.TraceRank{{Rank: 0, Node: "c"}}})
		wrote := make(chan error, 1)
		go func() { wrote <- wire.WriteFrame(a, typ, payload) }()
		if tc.want {
			if res := wait(t, col, "t1"); res.Spans != 1 || res.Err != nil {
				t.Errorf("master after %v: merged %+v, want the span", tc.after, res)
			}
			<-wrote
		}
		a.Close()
		<-done
		r.Close()
		col.Close()
		if trs, _ := s.get(); !tc.want && len(trs) != 0 {
			t.Errorf("not master: collected %d traces", len(trs))
		}
	}
}
