package cluster_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// A member that publishes 2,000 events/s for 10 s, ten times what the
// master's submit bucket lets through, stays a member: its heartbeats do
// not wait behind its events (they have a link of their own), no node
// sweeps it and no election happens. The longest silence between two of
// its heartbeats at the master is printed.
func TestSubmitFloodKeepsHeartbeats(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s of load")
	}
	now := time.Now()
	var mu sync.Mutex
	last := map[string]time.Time{} // "at<-from" → last heartbeat read
	gaps := map[string]time.Duration{}
	delays := map[string]time.Duration{} // the longest from sending to reading
	nodes := clustertest.StartCluster(t, clustertest.Options{TCP: true, FailAfter: time.Second,
		StartedAt: []time.Time{now, now.Add(time.Second), now.Add(2 * time.Second)},
		OnHeartbeat: func(node, from string, sent, received time.Time) {
			mu.Lock()
			defer mu.Unlock()
			k := node + "<-" + from
			delays[k] = max(delays[k], received.Sub(sent))
			if p, ok := last[k]; ok {
				gaps[k] = max(gaps[k], received.Sub(p))
			}
			last[k] = received
		}}, "m", "flooder", "other")
	testutil.WaitFor(t, "m elected by everyone", func() bool {
		for _, n := range nodes {
			if st := n.Node.Status(); st.MasterID != "m" || len(st.Members) != 3 {
				return false
			}
		}
		return true
	})
	term := nodes[0].Node.Status().Term
	mu.Lock()
	clear(gaps)
	clear(delays)
	mu.Unlock()
	flooder := nodes[1].Node
	ev, _ := json.Marshal(map[string]any{"sample": "x"})
	const rate, dur = 2000, 10 * time.Second
	start := time.Now()
	sent, refused := 0, 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	lost := ""
	for time.Since(start) < dur {
		<-tick.C
		for range rate / 100 {
			if err := flooder.Publish(wire.RawEvent{Type: "Sample", Event: ev}); err != nil {
				refused++
			}
			sent++
		}
		for _, n := range nodes {
			st := n.Node.Status()
			if lost == "" && (len(st.Members) != 3 || st.MasterID != "m" || st.Term != term) {
				lost = n.ID + " sees " + st.MasterID + " as master in term " + fmt.Sprint(st.Term) + " with members " + memberIDs(st.Members)
			}
		}
	}
	mu.Lock()
	worst, delay := gaps["m<-flooder"], delays["m<-flooder"]
	mu.Unlock()
	t.Logf("%d events published in %v (%d refused by a full queue); at the master, the flooder's heartbeats: longest gap %v, longest from sent to read %v (heartbeat %v, fail-after 1s)",
		sent, time.Since(start).Round(time.Millisecond), refused, worst.Round(time.Millisecond), delay.Round(time.Millisecond), clustertest.Heartbeat)
	if lost != "" {
		t.Fatalf("membership or mastership changed under the flood: %s", lost)
	}
	if worst == 0 {
		t.Fatal("no heartbeat from the flooder reached the master during the flood")
	}
	// On the control link they waited behind the paced events: 8.4 s.
	if delay >= 500*time.Millisecond {
		t.Errorf("a heartbeat took %v from the flooder to the master: it waited behind data (half of fail-after is the bound)", delay)
	}
}

func memberIDs(ms []cluster.Member) string {
	s := ""
	for _, m := range ms {
		s += m.NodeID + " "
	}
	return s
}

// A quiet cluster keeps its control links: with the heartbeats on their
// own links, a control link that carries no events still carries a
// keepalive each heartbeat, so its read deadline (FailAfter plus a
// heartbeat) never closes it, and no node dials its peers again.
func TestQuietControlLinksStay(t *testing.T) {
	var mu sync.Mutex
	dials := 0
	nodes := clustertest.StartCluster(t, clustertest.Options{DialResult: func(_ string, _ cluster.PeerAddr, err error) {
		if err == nil {
			mu.Lock()
			dials++
			mu.Unlock()
		}
	}}, "a", "b", "c")
	testutil.WaitFor(t, "a converged cluster", func() bool { return clustertest.Converged(nodes) })
	time.Sleep(2 * clustertest.Heartbeat) // links made by late dials settle
	mu.Lock()
	before := dials
	mu.Unlock()
	quiet := 4 * (clustertest.FailAfter + clustertest.Heartbeat)
	testutil.Never(t, quiet, fmt.Sprintf("a control link dialled again in %v of quiet (it was closed)", quiet), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return dials != before
	})
	if !clustertest.Converged(nodes) {
		t.Error("the cluster is not converged after the quiet")
	}
}
