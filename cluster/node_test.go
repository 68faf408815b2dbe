package cluster_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

func TestNodesElectReplicateAndFailOver(t *testing.T) {
	testutil.CheckLeaks(t)
	now := time.Now()
	nodes := clustertest.StartCluster(t, clustertest.Options{
		StartedAt: []time.Time{now.Add(2 * time.Second), now, now.Add(time.Second)}}, "a", "b", "c")

	testutil.WaitFor(t, "b elected by everyone", func() bool {
		for _, n := range nodes {
			if st := n.Node.Status(); st.MasterID != "b" || len(st.Members) != 3 {
				return false
			}
		}
		return true
	})
	// Every node publishes; all must apply the same events in the same order.
	for i := 0; i < 20; i++ {
		for _, n := range nodes {
			ev, _ := json.Marshal(map[string]any{"from": n.ID, "i": i})
			if err := n.Node.Publish(wire.RawEvent{Type: "T", Event: ev}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.WaitFor(t, "60 events everywhere, same hash", func() bool {
		return clustertest.Converged(nodes) && nodes[0].Node.Status().LastEventAppliedIdx >= 59
	})
	testutil.WaitFor(t, "probes to both peers from every node", func() bool {
		for _, n := range nodes {
			links := n.Node.Links()
			if len(links) != 2 || links[0].RTTEWMA <= 0 || links[0].BytesSent == 0 || links[0].BytesRecv == 0 || links[0].LocalAddr == "" || links[0].Probes < 5 {
				return false
			}
		}
		return true
	})
	// An in-memory link loses nothing: every probe counted was answered.
	for _, n := range nodes {
		for _, l := range n.Node.Links() {
			if l.LossPct != 0 {
				t.Errorf("%s→%s: %.1f %% loss over %d probes", n.ID, l.PeerID, l.LossPct, l.Probes)
			}
		}
	}

	// Worker a dies: the others sweep it, and the master reports it gone.
	nodes[0].Stop(t)
	testutil.WaitFor(t, "a gone on b and c", func() bool {
		return len(nodes[1].Node.Status().Members) == 2 && len(nodes[2].Node.Status().Members) == 2
	})
	testutil.WaitFor(t, "master told a is gone", func() bool { return slices.Equal(nodes[1].App.Gone(), []string{"a"}) })

	// Master b dies: c takes over and keeps indexing.
	nodes[1].Stop(t)
	testutil.WaitFor(t, "c is master", func() bool {
		st := nodes[2].Node.Status()
		return st.IsMaster && len(st.Members) == 1
	})
	if m := nodes[2].App.Masters(); len(m) == 0 || m[len(m)-1] != "c" {
		t.Errorf("c's application was told of masters %v, want c last", m)
	}
	before := nodes[2].Node.Status().LastEventAppliedIdx
	nodes[2].Node.Publish(wire.RawEvent{Type: "T", Event: []byte(`{"after":"failover"}`)})
	if got := nodes[2].Node.Status().LastEventAppliedIdx; got != before+1 {
		t.Errorf("new master indexed to %d, want %d", got, before+1)
	}
}

func TestLateJoinerResyncsFromMaster(t *testing.T) {
	testutil.CheckLeaks(t)
	nw := clustertest.NewNetwork()
	ca := clustertest.NewCA(t)
	now := time.Now()
	nodes := clustertest.StartCluster(t, clustertest.Options{Network: nw, CA: ca, StartedAt: []time.Time{now, now.Add(time.Second)}}, "m", "w")
	testutil.WaitFor(t, "pair formed", func() bool { return clustertest.Converged(nodes) })
	for i := 0; i < 10; i++ {
		nodes[0].Node.Publish(wire.RawEvent{Type: "T", Event: []byte(fmt.Sprint(i))})
	}
	testutil.WaitFor(t, "converged", func() bool {
		return clustertest.Converged(nodes) && nodes[1].Node.Status().LastEventAppliedIdx >= 9
	})
	// A node with its own solo history joins: it must adopt the master's.
	late := clustertest.StartCluster(t, clustertest.Options{Network: nw, CA: ca, StartedAt: []time.Time{now.Add(time.Hour)}}, "x")[0]
	for i := 0; i < 5; i++ {
		late.Node.Publish(wire.RawEvent{Type: "Solo", Event: []byte(fmt.Sprint(i))})
	}
	late.SetPeers([]cluster.PeerAddr{{Addr: nodes[0].Addr}}) // only m: it must learn w from m
	all := append(nodes, late)
	testutil.WaitFor(t, "late joiner converged", func() bool { return clustertest.Converged(all) })
	nodes[0].Node.Publish(wire.RawEvent{Type: "T", Event: []byte(`"after-join"`)})
	testutil.WaitFor(t, "event after join everywhere", func() bool {
		return clustertest.Converged(all) && late.Node.Status().LastEventAppliedIdx >= 10
	})
}

func TestPeerWithOtherCAIsRefused(t *testing.T) {
	testutil.CheckLeaks(t)
	nw := clustertest.NewNetwork()
	now := time.Now()
	var mu sync.Mutex
	var dialErr error
	good := clustertest.StartCluster(t, clustertest.Options{Network: nw, StartedAt: []time.Time{now}}, "g")[0]
	onDial := func(_ string, p cluster.PeerAddr, err error) {
		if p.Addr == good.Addr {
			mu.Lock()
			dialErr = err
			mu.Unlock()
		}
	}
	bad := clustertest.StartCluster(t, clustertest.Options{Network: nw, StartedAt: []time.Time{now.Add(-time.Hour)}, DialResult: onDial}, "b")[0]
	bad.SetPeers([]cluster.PeerAddr{{Addr: good.Addr}})
	testutil.WaitFor(t, "a refused dial", func() bool { mu.Lock(); defer mu.Unlock(); return dialErr != nil })
	testutil.Never(t, 5*clustertest.Heartbeat, "a node with another CA joining", func() bool {
		return len(good.Node.Status().Members) != 1 || len(bad.Node.Status().Members) != 1
	})
	var ua x509.UnknownAuthorityError
	mu.Lock()
	defer mu.Unlock()
	if !errors.As(dialErr, &ua) {
		t.Errorf("dial error = %v, want an unknown-authority error", dialErr)
	}
}

// echo is a stream handler: it answers a stream's first line, prefixed by
// who it came from and the stream's id.
func echo(ctx context.Context, peer, id string, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	fmt.Fprintf(c, "%s %s %s", peer, id, line)
}

// roundTrip writes a line on c and reads the answer.
func roundTrip(t *testing.T, c net.Conn, line string) string {
	t.Helper()
	fmt.Fprintf(c, "%s\n", line)
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("answer to %q: %v", line, err)
	}
	return got
}

// A stream reaches the handler registered for its purpose, authenticated
// (the peer sees our id), and its bytes count as traffic with that peer.
func TestStream(t *testing.T) {
	testutil.CheckLeaks(t)
	nodes := clustertest.StartCluster(t, clustertest.Options{}, "a", "b")
	a, b := nodes[0].Node, nodes[1].Node
	b.HandleStream(cluster.PurposeHTTP, echo)
	b.HandleStream("test-x", func(ctx context.Context, peer, id string, c net.Conn) {
		echo(ctx, peer, "x:"+id, c)
	})
	testutil.WaitFor(t, "2 members", func() bool { return clustertest.Converged(nodes) })
	ctx := context.Background()
	before := a.BytesSent()["b"]
	c, err := a.DialStream(ctx, "b", cluster.PurposeHTTP, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := roundTrip(t, c, "hello"); got != "a  hello\n" {
		t.Errorf("http stream echo %q", got)
	}
	if after := a.BytesSent()["b"]; after < before+6 {
		t.Errorf("bytes sent to b: %d then %d", before, after)
	}
	x, err := a.DialStream(ctx, "b", "test-x", "inst-1-r1")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if got := roundTrip(t, x, "y"); got != "a x:inst-1-r1 y\n" {
		t.Errorf("test-x stream echo %q", got)
	}
	// A purpose b has no handler for is refused: the stream just ends.
	r, err := a.DialStream(ctx, "b", cluster.PurposeRank, "inst-1-r1")
	if err == nil {
		fmt.Fprintf(r, "x\n")
		if _, err := bufio.NewReader(r).ReadString('\n'); err == nil {
			t.Error("a stream of an unhandled purpose was served")
		}
		r.Close()
	}
	if _, err := a.DialStream(ctx, "nobody", cluster.PurposeHTTP, ""); err == nil {
		t.Error("a stream to a non-member was opened")
	}
	for _, p := range []cluster.Purpose{"", "probe", "Bad", cluster.Purpose(strings.Repeat("p", 33))} {
		if _, err := a.DialStream(ctx, "b", p, ""); err == nil {
			t.Errorf("a stream of purpose %q was opened", p)
		}
	}
	if _, err := a.DialStream(ctx, "b", cluster.PurposeHTTP, "../x"); err == nil {
		t.Error("a stream with a bad id was opened")
	}
}

func TestHandleStreamRefusesReservedPurposes(t *testing.T) {
	n := clustertest.StartCluster(t, clustertest.Options{}, "a")[0].Node
	for _, p := range []cluster.Purpose{"", "probe", "UPPER"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("HandleStream(%q) did not panic", p)
				}
			}()
			n.HandleStream(p, echo)
		}()
	}
}

// The same over real loopback TCP: nodes link, replicate, probe and open
// streams.
func TestNodesOverTCP(t *testing.T) {
	testutil.CheckLeaks(t)
	nodes := clustertest.StartCluster(t, clustertest.Options{TCP: true}, "a", "b")
	nodes[1].Node.HandleStream(cluster.PurposeHTTP, echo)
	testutil.WaitFor(t, "a pair", func() bool { return clustertest.Converged(nodes) })
	nodes[0].Node.Publish(wire.RawEvent{Type: "T", Event: []byte(`1`)})
	nodes[1].Node.Publish(wire.RawEvent{Type: "T", Event: []byte(`2`)})
	testutil.WaitFor(t, "both events on both nodes", func() bool {
		return clustertest.Converged(nodes) && nodes[1].Node.Status().LastEventAppliedIdx == 1
	})
	testutil.WaitFor(t, "a probing b", func() bool {
		l := nodes[0].Node.Links()
		return len(l) == 1 && l[0].RTTEWMA > 0 && strings.HasPrefix(l[0].LocalAddr, "127.0.0.1:")
	})
	c, err := nodes[0].Node.DialStream(context.Background(), "b", cluster.PurposeHTTP, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := roundTrip(t, c, "tcp"); got != "a  tcp\n" {
		t.Errorf("echo %q", got)
	}
}

// A master cut off from the others (a partition, or a stall: its links go
// silent) comes back still claiming its old term. The others elected a
// new master in a higher term meanwhile and sequenced events through it;
// the old master must step down and adopt that history, not impose its
// own.
func TestStaleMasterStepsDown(t *testing.T) {
	testutil.CheckLeaks(t)
	nw := clustertest.NewNetwork()
	now := time.Now()
	nodes := clustertest.StartCluster(t, clustertest.Options{Network: nw,
		StartedAt: []time.Time{now, now.Add(time.Second), now.Add(2 * time.Second)}}, "m", "w1", "w2")
	testutil.WaitFor(t, "m elected", func() bool {
		return clustertest.Converged(nodes) && nodes[1].Node.Status().MasterID == "m"
	})
	if st := nodes[0].Node.Status(); st.Term != 0 {
		t.Fatalf("first master's term %d, want 0", st.Term)
	}

	nw.Isolate("m")
	testutil.WaitFor(t, "w1 elected by w1 and w2 in term 1", func() bool {
		a, b := nodes[1].Node.Status(), nodes[2].Node.Status()
		return a.IsMaster && a.Term == 1 && b.MasterID == "w1" && b.Term == 1 && len(a.Members) == 2
	})
	// Writes during the split, through a worker of the new master; m,
	// alone, stays its own master in term 0 and writes its own.
	for i := range 5 {
		nodes[2].Node.Publish(wire.RawEvent{Type: "Split", Event: []byte(fmt.Sprint(i))})
		nodes[0].Node.Publish(wire.RawEvent{Type: "Stale", Event: []byte(fmt.Sprint(i))})
	}
	testutil.WaitFor(t, "split writes applied on w1 and w2", func() bool {
		return clustertest.Converged(nodes[1:]) && nodes[1].Node.Status().LastEventAppliedIdx >= 4
	})
	if st := nodes[0].Node.Status(); !st.IsMaster || st.Term != 0 {
		t.Fatalf("isolated m: master %s term %d, want itself in term 0", st.MasterID, st.Term)
	}
	interim := nodes[1].Node.Status()

	nw.Heal("m")
	testutil.WaitFor(t, "m steps down and adopts w1's history", func() bool {
		return clustertest.Converged(nodes) && nodes[0].Node.Status().MasterID == "w1"
	})
	for _, n := range nodes {
		st := n.Node.Status()
		if st.MasterID != "w1" || st.Term != 1 || st.LastEventAppliedIdx < interim.LastEventAppliedIdx {
			t.Errorf("%s: master %s term %d idx %d; want w1, term 1, idx ≥ %d", n.ID, st.MasterID, st.Term,
				st.LastEventAppliedIdx, interim.LastEventAppliedIdx)
		}
	}
	if m := nodes[0].App.Masters(); len(m) == 0 || m[len(m)-1] != "w1" {
		t.Errorf("m's application was told of masters %v, want w1 last", m)
	}

	// A worker cut off becomes its own master, in the same term (alone,
	// it claims no new one); back, it does not take the cluster over.
	nw.Isolate("w2")
	testutil.WaitFor(t, "w2 alone", func() bool {
		st := nodes[2].Node.Status()
		return st.IsMaster && len(st.Members) == 1
	})
	if st := nodes[2].Node.Status(); st.Term != 1 {
		t.Errorf("w2 alone claims term %d, want 1", st.Term)
	}
	nw.Heal("w2")
	testutil.WaitFor(t, "w2 back under w1", func() bool {
		return clustertest.Converged(nodes) && nodes[2].Node.Status().MasterID == "w1"
	})
	if st := nodes[1].Node.Status(); !st.IsMaster || st.Term != 1 {
		t.Errorf("w1: master %s term %d after w2's return; want itself in term 1", st.MasterID, st.Term)
	}
}
