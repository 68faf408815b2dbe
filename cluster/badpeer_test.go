package cluster_test

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// badPeer connects to addr as node id, with a certificate of ca (it has
// the cluster key), and completes the Hello exchange.
func badPeer(t *testing.T, ca *clustertest.CA, id, addr string) *tls.Conn {
	t.Helper()
	_, cli := ca.TLS(t, id)
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, cli)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	writeMsg(t, c, &wire.Hello{NodeID: id, StartedAt: time.Now(), Version: "test"})
	if typ, _, err := wire.ReadFrame(c, 0); err != nil || typ != wire.TypeHello {
		t.Fatalf("hello from the node: %v %v", typ, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

func writeMsg(t *testing.T, c net.Conn, m wire.Message) {
	t.Helper()
	typ, b, err := wire.Encode(m)
	if err == nil {
		err = wire.WriteFrame(c, typ, b)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A member that floods its control link with valid frames (10 000 event
// submissions a second, to the master) is throttled to the link's rate
// for submitted events; the other members' replication goes on
// unaffected.
func TestFloodingPeerIsThrottled(t *testing.T) {
	testutil.CheckLeaks(t)
	ca := clustertest.NewCA(t)
	// The production failure timeout: a loaded test machine must not split
	// the pair on its own.
	nodes := clustertest.StartCluster(t, clustertest.Options{TCP: true, CA: ca, FailAfter: cluster.DefaultFailAfter}, "m", "w")
	testutil.WaitFor(t, "pair formed", func() bool { return clustertest.Converged(nodes) })
	c := badPeer(t, ca, "flood", nodes[0].Addr)
	sub, _ := json.Marshal(&wire.Submit{Events: []wire.RawEvent{{Type: "Flood", Event: []byte(`{}`)}}})
	before := nodes[0].Node.Status().LastEventAppliedIdx
	start := time.Now()
	// The flood goes on for 2 s at least, until the worker's events are in
	// and until it has written well past what the link lets through (10 s
	// at most). Writes block once the master throttles and TCP's window
	// fills: that is the point.
	const perSec, most = 10000, 10 * time.Second
	// The link's bucket for submitted events: 1000, refilled at 200/s;
	// some slack.
	limitAt := func(d time.Duration) float64 { return 1000 + 200*d.Seconds() + 100 }
	var sent atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	c.SetWriteDeadline(start.Add(most + time.Second))
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := wire.WriteFrame(c, wire.TypeSubmit, sub); err != nil {
				return
			}
			sent.Add(1)
			if i%10 == 9 { // paced: 10 frames a millisecond
				time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second / perSec)))
			}
		}
	}()
	// Once the flood is past the burst and throttled, the worker's events
	// still reach the master.
	testutil.WaitFor(t, "the flood past what the link lets through", func() bool { return float64(sent.Load()) > limitAt(time.Since(start)) })
	for i := range 10 {
		nodes[1].Node.Publish(wire.RawEvent{Type: "Work", Event: []byte(fmt.Sprint(i))})
	}
	testutil.WaitFor(t, "the worker's 10 events on the master", func() bool {
		n := 0
		for _, e := range appEvents(nodes[0]) {
			if e.Type == "Work" {
				n++
			}
		}
		return n == 10
	})
	workSeen := time.Since(start)
	testutil.Eventually(most-time.Since(start), func() bool {
		return time.Since(start) >= 2*time.Second && float64(sent.Load()) >= limitAt(time.Since(start))+1000
	})
	close(stop)
	c.SetWriteDeadline(time.Now()) // a write blocked by the throttle ends
	<-done
	elapsed := time.Since(start)
	applied := nodes[0].Node.Status().LastEventAppliedIdx - before - 10
	limit := limitAt(elapsed)
	t.Logf("flood: %d frames written in %v, %d applied by the master (limit %.0f); the worker's events all in after %v",
		sent.Load(), elapsed.Round(time.Millisecond), applied, limit, workSeen.Round(time.Millisecond))
	if float64(applied) > limit {
		t.Errorf("master applied %d flooded events in %v, over the link's rate (%.0f)", applied, elapsed, limit)
	}
	if workSeen >= elapsed {
		t.Errorf("the worker's events came in only after the flood (%v)", workSeen)
	}
	if float64(sent.Load()) <= limit {
		t.Errorf("the flood wrote only %d frames in %v: not a flood past the limit", sent.Load(), elapsed)
	}
	if !nodes[0].Node.Status().IsMaster || len(nodes[1].Node.Status().Members) < 2 {
		t.Error("the flood broke the pair")
	}
}

// appEvents lists the events a test node applied since its last restore.
func appEvents(n *clustertest.Node) []wire.IndexedEvent {
	evs, _ := n.App.EventsSince(0, math.MaxInt)
	return evs
}

// A peer that stops mid-frame, or mid-handshake, is cut off by the read
// deadlines, and leaves no goroutine behind (CheckLeaks).
func TestStalledPeerIsCutOff(t *testing.T) {
	testutil.CheckLeaks(t)
	ca := clustertest.NewCA(t)
	nodes := clustertest.StartCluster(t, clustertest.Options{TCP: true, CA: ca}, "m")
	closed := func(c net.Conn, within time.Duration) time.Duration {
		start := time.Now()
		c.SetReadDeadline(start.Add(within))
		var b [64]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("link still open after %v", within)
				}
				return time.Since(start)
			}
		}
	}
	// Mid-frame: a header announcing 1000 bytes, then 10 of them.
	c := badPeer(t, ca, "stall", nodes[0].Addr)
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:], 1000)
	hdr[4] = byte(wire.TypeSubmit)
	c.Write(append(hdr[:], make([]byte, 10)...))
	bound := clustertest.FailAfter + clustertest.Heartbeat
	if d := closed(c, bound+2*time.Second); d > bound+time.Second {
		t.Errorf("mid-frame stall cut off after %v, bound %v", d, bound)
	}
	// Mid-handshake: TCP connected, nothing sent.
	raw, err := net.Dial("tcp", nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if d := closed(raw, 6*time.Second); d > 4*time.Second {
		t.Errorf("silent handshake cut off after %v", d)
	}
}

// Members whose clocks are an hour ahead and an hour behind: the events
// are ordered all the same (the master sequences them), the election is
// the usual one, and each link shows the peer's offset.
func TestSkewedClocks(t *testing.T) {
	testutil.CheckLeaks(t)
	skew := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
	now := time.Now()
	nodes := clustertest.StartCluster(t, clustertest.Options{
		StartedAt: []time.Time{now, now.Add(time.Second), now.Add(2 * time.Second)},
		Clocks:    []func() time.Time{nil, skew(time.Hour), skew(-time.Hour)},
	}, "a", "ahead", "behind")
	testutil.WaitFor(t, "cluster of 3", func() bool { return clustertest.Converged(nodes) })
	for i := range 30 {
		n := nodes[i%3]
		n.Node.Publish(wire.RawEvent{Type: "T", Event: []byte(fmt.Sprintf(`{"from":%q,"i":%d}`, n.ID, i))})
	}
	testutil.WaitFor(t, "30 events in one order everywhere", func() bool {
		return clustertest.Converged(nodes) && nodes[0].Node.Status().LastEventAppliedIdx >= 29
	})
	if m := nodes[1].Node.Master(); m != "a" {
		t.Errorf("master %s, want the longest-running a", m)
	}
	var links []cluster.Link
	testutil.WaitFor(t, "clock offsets measured on a's links", func() bool {
		links = nodes[0].Node.Links()
		return len(links) == 2 && links[0].Probes >= 5 && links[1].Probes >= 5
	})
	for _, l := range links {
		want := map[string]time.Duration{"ahead": time.Hour, "behind": -time.Hour}[l.PeerID]
		if d := l.ClockOffset - want; d < -time.Second || d > time.Second {
			t.Errorf("a→%s: offset %v, want %v ± 1 s", l.PeerID, l.ClockOffset, want)
		}
	}
}
