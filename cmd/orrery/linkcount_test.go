package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// TestLinkCounters moves a 12 MB trace file from the master to the other
// node 20 times (a trace read on a follower is forwarded to the master
// over the peer API, as shard transfers are), read slowly enough to last
// about a second. Each time, both ends' per-peer byte counters must move
// by the bytes sent (±5 %), and /state/topology and the link telemetry
// must show a non-zero MB/s on that edge while it runs.
func TestLinkCounters(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (20 transfers between two agents): runs in make test")
	}
	bin := buildBinary(t)
	// The trace, in both nodes' stores: whichever becomes master serves it.
	const spans = 90_000
	tr := &trace.Trace{TaskID: "bulk-link-test"}
	for i := range spans {
		tr.Spans = append(tr.Spans, trace.Span{Name: fmt.Sprintf("decode step %d", i), Cat: "decode/compute",
			Node: "n", Rank: i % 3, StartNs: 1_700_000_000_000_000_000 + int64(i)*1000, DurNs: 900})
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	var size int64
	for _, d := range dirs {
		os.MkdirAll(filepath.Join(d, "traces"), 0o700)
		f, err := os.Create(filepath.Join(d, "traces", tr.TaskID+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := trace.WriteChrome(f, tr); err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		size = st.Size()
		f.Close()
	}
	if size < 10<<20 {
		t.Fatalf("the trace is %d bytes, want ≥ 10 MB", size)
	}
	env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
	extra := []string{"--loopback-dir", t.TempDir(), "--link-interval", "250ms", "--network-interval", "250ms"}
	ps := []*agentProc{startAgentEnv(t, bin, testutil.FreeAddr(t), dirs[0], env, extra...), startAgentEnv(t, bin, testutil.FreeAddr(t), dirs[1], env, extra...)}
	for _, p := range ps {
		waitHealthy(t, p)
	}
	// The first transfer starts as soon as the two agree on a master,
	// whether or not a probe has come back yet: a placement's shards move
	// that early too, and the counters must count them.
	pollAll(t, ps, 20*time.Second, "one master of 2 members", func() (bool, string) { return agreed(t, ps, 2) })
	var master, other *agentProc
	var masterID, otherID string
	for _, p := range ps {
		st, _ := status(t, p)
		if st.IsMaster {
			master, masterID = p, st.NodeID
		} else {
			other, otherID = p, st.NodeID
		}
	}
	if master == nil || other == nil {
		t.Fatal("no master, or two")
	}
	counter := func(p *agentProc, peer string, sent bool) uint64 {
		t.Helper()
		st, err := status(t, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range st.Links {
			if l.PeerID == peer {
				if sent {
					return l.BytesSent
				}
				return l.BytesRecv
			}
		}
		t.Fatalf("%s lists no link to %s: %+v", p.addr, peer, st.Links)
		return 0
	}
	var worst float64
	for run := range 20 {
		sent0, recv0 := counter(master, otherID, true), counter(other, masterID, false)
		var seenTopo, seenLink atomic.Bool
		stop := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				var topo struct {
					Connections []struct {
						Source, Sink string
						SendMBps     *float64 `json:"sendMBps"`
					} `json:"connections"`
				}
				if code, b, err := other.get("/state/topology"); err == nil && code == 200 && jsonUnmarshal(b, &topo) == nil {
					for _, c := range topo.Connections {
						if c.Source == masterID && c.Sink == otherID && c.SendMBps != nil && *c.SendMBps > 0 {
							seenTopo.Store(true)
						}
					}
				}
				var lt struct {
					Links []struct {
						Peer         string   `json:"peer"`
						PeerSendMBps *float64 `json:"peerSendMBps"`
					} `json:"links"`
				}
				if code, b, err := other.get("/state/nodeLinkTelemetry/" + masterID); err == nil && code == 200 && jsonUnmarshal(b, &lt) == nil {
					for _, l := range lt.Links {
						if l.Peer == otherID && l.PeerSendMBps != nil && *l.PeerSendMBps > 0 {
							seenLink.Store(true)
						}
					}
				}
			}
		}()
		start := time.Now()
		resp, err := http.Get("http://" + other.addr + "/v1/traces/" + tr.TaskID + "/raw")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("run %d: GET raw on the follower: %s", run, resp.Status)
		}
		// About 12 MB/s: the transfer lasts about a second.
		var got int64
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			got += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("run %d: read: %v", run, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		resp.Body.Close()
		took := time.Since(start)
		// The telemetry of the last interval is published a moment after:
		// wait for the MB/s and the counters (checked below, with what
		// they show when this gives up).
		testutil.Eventually(10*time.Second, func() bool {
			moved := func(n uint64) bool { return math.Abs(float64(n)-float64(size)) <= 0.05*float64(size) }
			return seenTopo.Load() && seenLink.Load() &&
				moved(counter(master, otherID, true)-sent0) && moved(counter(other, masterID, false)-recv0)
		})
		close(stop)
		<-watched
		if got != size {
			t.Fatalf("run %d: read %d bytes, want %d", run, got, size)
		}
		dSent, dRecv := counter(master, otherID, true)-sent0, counter(other, masterID, false)-recv0
		for _, d := range []struct {
			what string
			n    uint64
		}{{"master's bytes sent to the follower", dSent}, {"follower's bytes received from the master", dRecv}} {
			dev := math.Abs(float64(d.n)-float64(size)) / float64(size)
			worst = max(worst, dev)
			if dev > 0.05 {
				t.Errorf("run %d: %s moved by %d, want %d ±5%%", run, d.what, d.n, size)
			}
		}
		if !seenTopo.Load() || !seenLink.Load() {
			t.Errorf("run %d (%v): MB/s on the edge %.8s→%.8s: topology %v, link telemetry %v; want both non-zero during the transfer", run, took.Round(time.Millisecond), masterID, otherID, seenTopo.Load(), seenLink.Load())
		}
		t.Logf("run %d: %d bytes in %v; counters moved %d (sent) and %d (received)", run, size, took.Round(time.Millisecond), dSent, dRecv)
	}
	t.Logf("link counters: 20 transfers of %d bytes, the worst counter off by %.2f%%", size, 100*worst)
}
