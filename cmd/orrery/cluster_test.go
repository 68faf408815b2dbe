package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

func status(t *testing.T, p *agentProc) (cluster.Status, error) {
	return p.api().Cluster(context.Background())
}

// agreed reports whether every agent follows the same master and sees
// exactly want members.
func agreed(t *testing.T, ps []*agentProc, want int) (bool, string) {
	var master string
	for i, p := range ps {
		st, err := status(t, p)
		if err != nil {
			return false, err.Error()
		}
		if len(st.Members) != want || (i > 0 && st.MasterID != master) {
			return false, fmt.Sprintf("%s: master %s, %d members", st.NodeID, st.MasterID, len(st.Members))
		}
		master = st.MasterID
	}
	return true, ""
}

// sameHash reports whether all agents had the same state hash at the
// highest index they have all applied.
func sameHash(t *testing.T, ps []*agentProc) (bool, string) {
	idx := int64(-1)
	for i, p := range ps {
		st, err := status(t, p)
		if err != nil {
			return false, err.Error()
		}
		if i == 0 || st.LastEventAppliedIdx < idx {
			idx = st.LastEventAppliedIdx
		}
	}
	if idx < 0 {
		return false, "no events yet"
	}
	var hash string
	for i, p := range ps {
		h, err := p.api().ClusterHash(context.Background(), idx)
		if err != nil {
			return false, fmt.Sprintf("hash at %d: %v", idx, err)
		}
		if i > 0 && h.StateHash != hash {
			return false, fmt.Sprintf("hash at %d differs: %s vs %s", idx, hash, h.StateHash)
		}
		hash = h.StateHash
	}
	return true, ""
}

// pollAll is poll over several agents: it fails if any of them exits.
func pollAll(t *testing.T, ps []*agentProc, limit time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	exited := func() string {
		for _, p := range ps {
			if p.exited() {
				return "an agent\nstderr:\n" + p.stderr.String()
			}
		}
		return ""
	}
	logs := func() string {
		var logs strings.Builder
		for _, p := range ps {
			fmt.Fprintf(&logs, "--- %s\n%s\n", p.addr, tail(p.stderr.String(), 3000))
		}
		return logs.String()
	}
	return pollUntil(t, limit, what, exited, logs, cond)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func identities(t *testing.T, p *agentProc) map[string]any {
	var m map[string]any
	p.mustGet(t, "/state/nodeIdentities", &m)
	return m
}

// TestClusterProcesses runs real agents on loopback: discovery through a
// shared loopback dir, TLS peer links authenticated by the cluster key,
// election, replication and failure detection.
func TestClusterProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (agents forming, failing and rejoining a cluster): runs in make test")
	}
	bin := buildBinary(t)
	env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
	lb := t.TempDir()
	extra := []string{"--loopback-dir", lb, "--memory-interval", "200ms", "--log-level", "debug", "--trace-merge-timeout", "2s"}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var ps []*agentProc
	for _, d := range dirs {
		ps = append(ps, startAgentEnv(t, bin, testutil.FreeAddr(t), d, env, extra...))
	}
	for _, p := range ps {
		waitHealthy(t, p)
	}
	took := pollAll(t, ps, 10*time.Second, "one master and 3 members everywhere", func() (bool, string) { return agreed(t, ps, 3) })
	t.Logf("3 agents agreed on a master in %v", took)
	pollAll(t, ps, 5*time.Second, "the same state hash at a common index", func() (bool, string) { return sameHash(t, ps) })
	// Each node republishes its identity when it starts following a
	// master; within a few heartbeats every node knows every identity.
	pollAll(t, ps, 5*time.Second, "3 identities everywhere", func() (bool, string) {
		for _, p := range ps {
			if n := len(identities(t, p)); n != 3 {
				return false, fmt.Sprintf("%s knows %d identities", p.addr, n)
			}
		}
		return true, ""
	})

	// Topology: every ordered pair is an edge carrying link telemetry.
	pollAll(t, ps, 10*time.Second, "6 edges with telemetry in the topology", func() (bool, string) {
		var topo struct {
			Nodes       []any `json:"nodes"`
			Connections []struct {
				Source, Sink, ConnectionType, SourceInterface string
				RTTMs                                         float64
			} `json:"connections"`
		}
		ps[1].mustGet(t, "/state/topology", &topo)
		if len(topo.Nodes) != 3 || len(topo.Connections) != 6 {
			return false, fmt.Sprintf("%d nodes, %d edges", len(topo.Nodes), len(topo.Connections))
		}
		for _, c := range topo.Connections {
			if c.RTTMs <= 0 || c.ConnectionType != "loopback" || c.SourceInterface != "lo" || c.Source == c.Sink {
				return false, fmt.Sprintf("edge %+v", c)
			}
		}
		return true, ""
	})

	// The ring benchmark, through the CLI, over real rank links.
	out, err := exec.Command(bin, "ring-bench", "--api", "http://"+ps[2].addr, "--size", "1048576", "--rounds", "3", "--json").Output()
	if err != nil {
		t.Fatalf("ring-bench: %v\n%s", err, out)
	}
	var ring api.RingBenchResult
	if err := json.Unmarshal(out, &ring); err != nil {
		t.Fatalf("ring-bench output %s: %v", out, err)
	}
	if len(ring.Order) != 3 || len(ring.Hops) != 3 || len(ring.RoundMs) != 3 {
		t.Fatalf("ring-bench result: %s", out)
	}
	for _, h := range ring.Hops {
		if h.From == h.To || h.LatencyMsAvg <= 0 || h.ThroughputMBps <= 0 {
			t.Errorf("hop %+v", h)
		}
	}
	t.Logf("ring-bench 1 MiB × 3 on loopback: %+v", ring.Hops)

	// Every rank shipped its spans to the master, which merged one trace: a
	// byRank entry per node, and raw Chrome JSON with M, X, C and s/f
	// events, link MB/s tracks, no flow pointing backwards.
	var withID struct {
		TraceID     string `json:"traceId"`
		TraceMaster string `json:"traceMaster"`
	}
	json.Unmarshal(out, &withID)
	var mp *agentProc
	for _, p := range ps {
		if s, _ := status(t, p); s.IsMaster {
			mp = p
			if withID.TraceMaster != s.NodeID {
				t.Errorf("traceMaster %q, want the master %s", withID.TraceMaster, s.NodeID)
			}
		}
	}
	if withID.TraceID == "" || mp == nil {
		t.Fatalf("ring-bench result has no traceId, or no master: %s", out)
	}
	pollAll(t, []*agentProc{mp}, 5*time.Second, "the ring trace on the master", func() (bool, string) {
		code, b, err := mp.get("/v1/traces/" + withID.TraceID)
		return err == nil && code == 200, fmt.Sprintf("%d %s %v", code, b, err)
	})
	var list struct {
		Traces []struct {
			TaskID  string `json:"taskId"`
			Partial bool   `json:"partial"`
			Nodes   int    `json:"nodes"`
		} `json:"traces"`
	}
	mp.mustGet(t, "/v1/traces", &list)
	if len(list.Traces) == 0 || list.Traces[0].TaskID != withID.TraceID || list.Traces[0].Partial || list.Traces[0].Nodes != 3 {
		t.Errorf("/v1/traces = %+v, want %s first, complete, 3 nodes", list, withID.TraceID)
	}
	var stats struct {
		ByRank map[string]any `json:"byRank"`
	}
	mp.mustGet(t, "/v1/traces/"+withID.TraceID+"/stats", &stats)
	if len(stats.ByRank) != 3 {
		t.Errorf("stats byRank has %d ranks, want 3: %+v", len(stats.ByRank), stats.ByRank)
	}
	var raw struct {
		TraceEvents []struct {
			Ph   string  `json:"ph"`
			Name string  `json:"name"`
			Pid  int     `json:"pid"`
			ID   any     `json:"id"`
			Ts   float64 `json:"ts"`
		} `json:"traceEvents"`
	}
	mp.mustGet(t, "/v1/traces/"+withID.TraceID+"/raw", &raw)
	phases := map[string]int{}
	starts := map[string]float64{}
	counters := map[string]bool{}
	linkTracks := map[string]bool{} // pid + name: one track per sender and peer
	for _, e := range raw.TraceEvents {
		phases[e.Ph]++
		if e.Ph == "s" {
			starts[fmt.Sprint(e.ID)] = e.Ts
		}
		if e.Ph == "C" {
			counters[strings.Fields(e.Name)[0]] = true
			linkTracks[fmt.Sprint(e.Pid, e.Name)] = true
		}
	}
	for _, e := range raw.TraceEvents {
		if s, ok := starts[fmt.Sprint(e.ID)]; ok && e.Ph == "f" && e.Ts < s {
			t.Errorf("flow %v ends at %.1f µs, before it starts at %.1f", e.ID, e.Ts, s)
		}
	}
	for _, ph := range []string{"M", "X", "C", "s", "f"} {
		if phases[ph] == 0 {
			t.Errorf("raw trace has no %q events (has %v)", ph, phases)
		}
	}
	if phases["s"] != 9 || phases["f"] != 9 {
		t.Errorf("want 9 flows (3 hops × 3 rounds): %v", phases)
	}
	if !counters["memory"] || !counters["link"] {
		t.Errorf("counter tracks %v, want memory and link", counters)
	}
	// 3 memory tracks, and 2 link tracks (one per peer) on each of 3 nodes.
	if len(linkTracks) != 9 {
		t.Errorf("counter tracks by process %v, want 9", linkTracks)
	}

	// A worker answers trace reads from the master's store, over the peer
	// link: the same list and the same bytes.
	var worker *agentProc
	for _, p := range ps {
		if p != mp {
			worker = p
			break
		}
	}
	var wlist struct {
		Traces []struct {
			TaskID string `json:"taskId"`
		} `json:"traces"`
	}
	worker.mustGet(t, "/v1/traces", &wlist)
	if len(wlist.Traces) != len(list.Traces) || wlist.Traces[0].TaskID != withID.TraceID {
		t.Errorf("a worker's /v1/traces = %+v, want the master's %+v", wlist, list)
	}
	_, mraw, _ := mp.get("/v1/traces/" + withID.TraceID + "/raw")
	if code, wraw, err := worker.get("/v1/traces/" + withID.TraceID + "/raw"); err != nil || code != 200 || !bytes.Equal(wraw, mraw) {
		t.Errorf("a worker's /raw: %d, %d bytes (master's: %d), %v", code, len(wraw), len(mraw), err)
	}
	if code, b, _ := worker.get("/v1/traces/no-such-trace/stats"); code != 404 {
		t.Errorf("a worker's stats of an unknown trace: %d %s, want 404", code, b)
	}
	// The UI: "/" leads to /ui/; other unknown paths stay 404.
	if code, b, err := worker.get("/"); err != nil || code != 200 || !strings.Contains(string(b), "<title>Orrery") {
		t.Errorf("GET / (→ /ui/): %d %.200s %v", code, b, err)
	}
	if code, _, _ := worker.get("/no-such-endpoint"); code != 404 {
		t.Errorf("GET /no-such-endpoint: %d, want 404", code)
	}

	// /metrics, parsed as Prometheus does: memory series for every node,
	// link series for every link of every node (all nodes export the
	// cluster, from the replicated state), the trace store.
	// Link MB/s come from a node's second published link sample (a rate
	// needs two), within 10 s (linkRepublish): wait for them.
	var body []byte
	pollAll(t, ps, 15*time.Second, "/metrics with link MB/s", func() (bool, string) {
		code, b, err := worker.get("/metrics")
		body = b
		return err == nil && code == 200 && bytes.Contains(b, []byte("orrery_link_send_bytes_per_second{")), fmt.Sprint(code, err)
	})
	var tp expfmt.TextParser
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%.500s", err, body)
	}
	series := func(name, label string) map[string]float64 {
		out := map[string]float64{}
		if f := fams[name]; f != nil {
			for _, m := range f.Metric {
				key := ""
				for _, l := range m.Label {
					if l.GetName() == label {
						key = l.GetValue()
					}
				}
				out[key] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	var idents map[string]any
	worker.mustGet(t, "/state/nodeIdentities", &idents)
	mem := series("orrery_node_memory_total_bytes", "node")
	links := map[string]int{}
	if f := fams["orrery_link_rtt_seconds"]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "source" {
					links[l.GetValue()]++
				}
			}
			if m.GetGauge().GetValue() <= 0 {
				t.Errorf("link RTT series %v is %v", m.Label, m.GetGauge().GetValue())
			}
		}
	}
	if len(idents) != 3 {
		t.Errorf("want 3 node identities, have %d", len(idents))
	}
	for id := range idents {
		if mem[id] <= 0 {
			t.Errorf("/metrics has no memory series for node %s: %v", id, mem)
		}
		if links[id] != 2 {
			t.Errorf("/metrics has %d link RTT series from node %s, want 2", links[id], id)
		}
	}
	if len(series("orrery_link_send_bytes_per_second", "source")) == 0 || fams["orrery_trace_store_bytes"] == nil {
		t.Errorf("/metrics lacks link MB/s or trace store series: %v", slices.Collect(maps.Keys(fams)))
	}

	// --no-trace runs leave no trace; --repeat prints median times.
	out, err = exec.Command(bin, "ring-bench", "--api", "http://"+mp.addr, "--size", "1024", "--rounds", "2", "--repeat", "3", "--no-trace").Output()
	if err != nil || !strings.HasPrefix(string(out), "3 runs (not traced): full round median ") {
		t.Errorf("ring-bench --repeat 3 --no-trace: %v\n%s", err, out)
	}
	var after struct {
		Traces []any `json:"traces"`
	}
	mp.mustGet(t, "/v1/traces", &after)
	if len(after.Traces) != len(list.Traces) {
		t.Errorf("untraced runs changed the trace count from %d to %d", len(list.Traces), len(after.Traces))
	}

	st, _ := status(t, ps[0])
	master := st.MasterID
	var workers, masters []*agentProc
	var workerDirs []string
	for i, p := range ps {
		s, _ := status(t, p)
		if s.IsMaster {
			masters = append(masters, p)
		} else {
			workers = append(workers, p)
			workerDirs = append(workerDirs, dirs[i])
		}
	}
	if len(masters) != 1 {
		t.Fatalf("%d agents think they are master", len(masters))
	}

	// kill -9 a worker in the middle of a long ring benchmark: the run
	// fails, and the master saves a partial trace that names the dead
	// rank (after --trace-merge-timeout) with the others' spans. The others
	// mark the worker gone within 5 s and drop it from the state.
	victim := workers[0]
	vs, _ := status(t, victim)
	recvBefore := bytesRecv(t, victim)
	benchErr := make(chan string, 1)
	go func() {
		code, b, err := masters[0].post("/v1/cluster/ring-bench", `{"sizeBytes":16777216,"rounds":100}`)
		benchErr <- fmt.Sprintf("%d %s %v", code, b, err)
	}()
	// Kill it once a second round's payload has reached it: rounds run one
	// after another, so round 0 has gone all the way round and every rank
	// has spans to report.
	pollAll(t, []*agentProc{victim}, 30*time.Second, "two rounds' payloads at the victim", func() (bool, string) {
		got := bytesRecv(t, victim) - recvBefore
		return got >= 2*16<<20, fmt.Sprintf("%d bytes received", got)
	})
	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.wait(t, 5*time.Second)
	select {
	case res := <-benchErr:
		if !strings.HasPrefix(res, "400 ") || !strings.Contains(res, "partial trace") {
			t.Errorf("ring bench through a killed member: %s", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ring bench did not end within 10 s of a member's death")
	}
	// Ring order: the coordinator, then the others by node id.
	ms, _ := status(t, masters[0])
	s1, _ := status(t, workers[1])
	others := []string{vs.NodeID, s1.NodeID}
	slices.Sort(others)
	victimRank := 1 + slices.Index(others, vs.NodeID)
	pollAll(t, masters, 10*time.Second, "a partial trace naming the dead rank", func() (bool, string) {
		var l struct {
			Traces []struct {
				TaskID       string `json:"taskId"`
				Partial      bool   `json:"partial"`
				MissingRanks []int  `json:"missingRanks"`
				Spans        int    `json:"spans"`
				Error        string `json:"error"`
			} `json:"traces"`
		}
		masters[0].mustGet(t, "/v1/traces", &l)
		tr := l.Traces[0]
		ok := tr.TaskID != withID.TraceID && tr.Partial && slices.Equal(tr.MissingRanks, []int{victimRank}) && tr.Spans > 0 && tr.Error != ""
		return ok, fmt.Sprintf("newest trace %+v (master %s, victim rank %d)", tr, ms.NodeID, victimRank)
	})
	rest := []*agentProc{masters[0], workers[1]}
	took = pollAll(t, rest, 5*time.Second, "the killed worker gone", func() (bool, string) { return agreed(t, rest, 2) })
	t.Logf("killed worker marked gone in %v", took)
	pollAll(t, rest, 3*time.Second, "the killed worker's identity removed", func() (bool, string) {
		for _, p := range rest {
			if _, ok := identities(t, p)[vs.NodeID]; ok {
				return false, p.addr + " still lists it"
			}
		}
		return true, ""
	})

	// The worker restarts with its data dir: it rejoins with the same id.
	back := startAgentEnv(t, bin, victim.addr, workerDirs[0], env, extra...)
	waitHealthy(t, back)
	all := append(rest, back)
	pollAll(t, all, 10*time.Second, "the restarted worker back", func() (bool, string) { return agreed(t, all, 3) })
	if bs, _ := status(t, back); bs.NodeID != vs.NodeID || bs.MasterID != master {
		t.Errorf("restarted worker: id %s (was %s), master %s (was %s)", bs.NodeID, vs.NodeID, bs.MasterID, master)
	}

	// kill -9 the master: a new one takes over within 5 s and all converge.
	masters[0].cmd.Process.Signal(syscall.SIGKILL)
	masters[0].wait(t, 5*time.Second)
	survivors := []*agentProc{workers[1], back}
	took = pollAll(t, survivors, 5*time.Second, "a new master", func() (bool, string) {
		ok, msg := agreed(t, survivors, 2)
		if ok {
			if s, _ := status(t, survivors[0]); s.MasterID == master {
				return false, "still following the dead master"
			}
		}
		return ok, msg
	})
	t.Logf("new master elected in %v after the master was killed", took)
	pollAll(t, survivors, 5*time.Second, "convergence after failover", func() (bool, string) { return sameHash(t, survivors) })

	// An agent with another key never joins, and its discovery report
	// names the mismatch.
	other := startAgentEnv(t, bin, testutil.FreeAddr(t), filepath.Join(t.TempDir(), "x"), []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}, extra...)
	waitHealthy(t, other)
	pollAll(t, []*agentProc{other}, 10*time.Second, "a key-mismatch diagnosis", func() (bool, string) {
		_, b, err := other.get("/state/discovery")
		if err != nil {
			return false, err.Error()
		}
		s0, _ := status(t, survivors[0])
		return strings.Contains(string(b), `"key-mismatch"`) && (strings.Contains(string(b), vs.NodeID) || strings.Contains(string(b), s0.NodeID)), string(b)
	})
	// 2 s of heartbeats: membership must not change.
	testutil.Never(t, 2*time.Second, "a membership change when a foreign agent appeared", func() bool {
		if s, _ := status(t, other); len(s.Members) != 1 {
			t.Logf("agent with another key has %d members", len(s.Members))
			return true
		}
		if ok, msg := agreed(t, survivors, 2); !ok {
			t.Logf("cluster changed: %s", msg)
			return true
		}
		return false
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// bytesRecv is what p has received from its peers over all links.
func bytesRecv(t *testing.T, p *agentProc) uint64 {
	st, err := status(t, p)
	if err != nil {
		t.Fatalf("GET /cluster: %v", err)
	}
	var n uint64
	for _, l := range st.Links {
		n += l.BytesRecv
	}
	return n
}
