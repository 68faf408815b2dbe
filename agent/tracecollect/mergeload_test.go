package tracecollect

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// Merging under load: three real nodes on loopback TCP, one rank on each
// (the master's own included) recording spans with a trace.Recorder at
// 50 k spans/s and shipping them through a live Shipper and the Router,
// as a traced task does; then the master's Collector merges them all and
// saves the Chrome trace. Heartbeats must keep flowing meanwhile. The test
// asserts what must hold (every span merged, none dropped, no heartbeat
// gap reaching FailAfter, no member lost, the master and its term
// unchanged) and prints the figures (rates, merge time, heartbeat gaps),
// which it never asserts.
//
//	go test -run TestMergeKeepsHeartbeats -v ./agent/tracecollect/
//	ORRERY_MERGELOAD_DURATION=10s go test -run TestMergeKeepsHeartbeats -v ./agent/tracecollect/
//	go test -run '^$' -bench MergeHeartbeats -benchtime 1x ./agent/tracecollect/
//
// ORRERY_MERGELOAD_RATE sets the spans per second of each rank.
// Heartbeats go every 100 ms (clustertest.Heartbeat), so that their gaps
// are measured finely; a member is gone after the agent's FailAfter (3 s)
// unless ORRERY_MERGELOAD_FAILAFTER says otherwise (clustertest's 500 ms
// is a stricter bound). With GODEBUG=gctrace=1 the GC cycles can be set
// against the report's "longest silence".

const (
	mergeLoadRate     = 50_000 // spans/s per rank
	mergeLoadTestDur  = 3 * time.Second
	mergeLoadBenchDur = 10 * time.Second
	mergeLoadTask     = "mergeload"
	// A decode step records a parent span and three children.
	spansPerStep = 4
	// maxBeats bounds the heartbeats kept per link (10 per second).
	maxBeats = 1 << 14
	// maxHeldSamples bounds the collector samples (one per 2 ms).
	maxHeldSamples = 1 << 16
)

var mergeLoadNodes = []string{"a", "b", "c"}

func TestMergeKeepsHeartbeats(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test: skipped with -short")
	}
	if raceEnabled() && os.Getenv("ORRERY_MERGELOAD_DURATION") == "" {
		// The race detector slows encoding and decoding the spans about
		// tenfold: the ranks' backlog then outlasts the merge timeout.
		t.Skip("a load test: skipped under -race unless ORRERY_MERGELOAD_DURATION is set")
	}
	r := runMergeLoad(t, mergeLoadParams(t, mergeLoadTestDur))
	for _, line := range r.report() {
		t.Log(line)
	}
}

func BenchmarkMergeHeartbeats(b *testing.B) {
	p := mergeLoadParams(b, mergeLoadBenchDur)
	var r *mergeLoad
	for range b.N {
		r = runMergeLoad(b, p)
	}
	b.StopTimer()
	for _, line := range r.report() {
		b.Log(line)
	}
	shipping, merging := r.followerGaps()
	b.ReportMetric(float64(r.shipped())/r.loadTime().Seconds(), "shipped-spans/s")
	b.ReportMetric(float64(r.spans)/r.times.mergeStart.Sub(r.times.loadStart).Seconds(), "received-spans/s")
	b.ReportMetric(ms(r.times.saveStart.Sub(r.times.mergeStart)), "merge-ms")
	b.ReportMetric(ms(r.times.saveEnd.Sub(r.times.saveStart)), "save-ms")
	b.ReportMetric(ms(shipping.p50), "hb-ship-p50-ms")
	b.ReportMetric(ms(shipping.p99), "hb-ship-p99-ms")
	b.ReportMetric(ms(shipping.max), "hb-ship-max-ms")
	b.ReportMetric(ms(merging.max), "hb-merge-max-ms")
	b.ReportMetric(ms(r.followerGapsIn(r.times.idleStart, r.times.loadStart).max), "hb-idle-max-ms")
	b.ReportMetric(float64(r.info.Dropped), "dropped")
}

// loadParams say how hard and how long to load.
type loadParams struct {
	dur       time.Duration // of the load
	rate      int           // spans/s per rank
	failAfter time.Duration // cluster.Config.FailAfter
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && slices.ContainsFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "-race" && s.Value == "true" })
}

// mergeLoadParams is the load's duration (dur, or ORRERY_MERGELOAD_DURATION),
// each rank's rate (ORRERY_MERGELOAD_RATE, else 50 k spans/s) and the
// nodes' FailAfter (ORRERY_MERGELOAD_FAILAFTER, else the agent's).
func mergeLoadParams(tb testing.TB, dur time.Duration) loadParams {
	p := loadParams{dur: dur, rate: mergeLoadRate, failAfter: cluster.DefaultFailAfter}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"ORRERY_MERGELOAD_DURATION", &p.dur}, {"ORRERY_MERGELOAD_FAILAFTER", &p.failAfter}} {
		if v := os.Getenv(d.env); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 || x > 10*time.Minute {
				tb.Fatalf("%s=%q: want a duration up to 10m", d.env, v)
			}
			*d.to = x
		}
	}
	if v := os.Getenv("ORRERY_MERGELOAD_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 10_000_000 {
			tb.Fatalf("ORRERY_MERGELOAD_RATE=%q: want spans per second per rank", v)
		}
		p.rate = n
	}
	return p
}

// mergeLoad is one run: what was shipped, merged and heard.
type mergeLoad struct {
	dur                  time.Duration
	rate                 int
	heartbeat, failAfter time.Duration
	taskSpans            int // the collector's memory budget for the task
	ranks                []rankLoad
	times                mergeTimes
	held                 []heldSample // spans held by the collector during the load
	spans                int          // merged
	info                 Info
	chromeBytes          int64
	beats                map[beatKey][]beat
	rt                   runtimeStats
	os                   []osSample
}

type mergeTimes struct {
	idleStart          time.Time // the cluster is formed; the heartbeats' baseline
	loadStart, loadEnd time.Time // the first rank starts recording, the last stops
	shipped            time.Time // the last rank's final chunk is sent
	mergeStart         time.Time // the collector has every final chunk
	saveStart, saveEnd time.Time // Save called, returned
	end                time.Time // the cluster checked, after a few more heartbeats
}

type rankLoad struct {
	node        string
	spans       int
	start, stop time.Time // recording
	finished    time.Time // Finish returned
	recDropped  uint64
	err         error
}

// runMergeLoad runs the load, waits for the merge and checks what must
// hold.
func runMergeLoad(tb testing.TB, p loadParams) *mergeLoad {
	testutil.CheckLeaks(tb)
	dur, rate := p.dur, p.rate
	beats := &beatLog{m: map[beatKey][]beat{}}
	nodes := clustertest.StartCluster(tb, clustertest.Options{TCP: true, OnHeartbeat: beats.add, FailAfter: p.failAfter}, mergeLoadNodes...)
	r := &mergeLoad{dur: dur, rate: rate, heartbeat: clustertest.Heartbeat, failAfter: p.failAfter}
	// The agent's budgets, but small enough for a short run to spill a
	// few times too: the merge then streams from disk.
	r.taskSpans = min(DefaultTaskSpans, max(1000, len(nodes)*rate*int(dur/time.Millisecond)/1000/3))
	spill := tb.TempDir()
	master := nodes[0]
	var save saveRecord
	dir := tb.TempDir()
	cols := make([]*Collector, len(nodes))
	routers := make([]*Router, len(nodes))
	others := &saved{}
	for i, n := range nodes {
		cfg := Config{Self: n.ID, Save: others.save, TaskSpans: r.taskSpans, SpillDir: filepath.Join(spill, n.ID), ClockOffsets: offsetsOf(n)}
		if n == master {
			cfg.Save = save.save(dir)
		}
		cols[i] = New(cfg)
		routers[i] = NewRouter(n.Node, cols[i], DefaultTimeout+resendMargin, nil)
		tb.Cleanup(cols[i].Close)
		tb.Cleanup(routers[i].Close)
	}
	testutil.WaitFor(tb, "3 members everywhere", func() bool { return clustertest.Converged(nodes) })
	testutil.WaitFor(tb, "clock offsets of both peers", func() bool { return len(offsetsOf(master)()) == len(nodes)-1 })
	if m := master.Node.Master(); m != master.ID {
		tb.Fatalf("master %s, want the longest-running %s", m, master.ID)
	}
	term := master.Node.Status().Term
	masters := make([]int, len(nodes))
	for i, n := range nodes {
		masters[i] = len(n.App.Masters())
	}
	watch := watchCollector(cols[0], mergeLoadTask)
	defer watch.stop()
	// A baseline: the heartbeats' gaps on this machine with no load.
	osw := watchOS()
	defer osw.stop()
	r.times.idleStart = time.Now()
	time.Sleep(min(max(dur/3, time.Second), 5*time.Second))
	rt0 := readRuntime()
	r.ranks = shipRanks(tb, nodes, routers, rate, dur)
	r.times.loadStart, r.times.loadEnd, r.times.shipped = r.ranks[0].start, r.ranks[0].stop, r.ranks[0].finished
	for _, rk := range r.ranks {
		r.times.loadStart = minTime(r.times.loadStart, rk.start)
		r.times.loadEnd = maxTime(r.times.loadEnd, rk.stop)
		r.times.shipped = maxTime(r.times.shipped, rk.finished)
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout+time.Minute)
	res, err := cols[0].Wait(ctx, mergeLoadTask)
	cancel()
	if err != nil {
		tb.Fatal(err)
	}
	r.rt = readRuntime().since(rt0)
	r.times.mergeStart, r.held = watch.stop()
	// A few more heartbeats, so that a gap across the merge's end counts.
	time.Sleep(3 * r.heartbeat)
	r.times.end = time.Now()
	r.os = osw.stop()
	r.beats = beats.snapshot()
	r.check(tb, res, &save, nodes, term, masters)
	for i := range nodes {
		routers[i].Close()
		cols[i].Close()
	}
	if trs, _ := others.get(); len(trs) != 0 {
		tb.Errorf("%d traces saved on a node that is not the master", len(trs))
	}
	// Stop the nodes together: one stopped alone waits until the others
	// sweep it (FailAfter) and close their probe links to it.
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.Stop(tb) })
	}
	wg.Wait()
	return r
}

// offsetsOf is the Tracer's ClockOffsets for node n: every probed peer's
// clock minus ours.
func offsetsOf(n *clustertest.Node) func() map[string]time.Duration {
	return func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for _, l := range n.Node.Links() {
			if l.Probes > 0 {
				out[l.PeerID] = l.ClockOffset
			}
		}
		return out
	}
}

// shipRanks runs rank i on node i for dur, recording at rate spans/s
// through a live Shipper whose chunks go through the node's Router; rank
// 0's node (the master) announces the task once its rank is shipped, as
// Tracer.ShipTask does. It returns when every rank is shipped.
func shipRanks(tb testing.TB, nodes []*clustertest.Node, routers []*Router, rate int, dur time.Duration) []rankLoad {
	out := make([]rankLoad, len(nodes))
	spillDir := tb.TempDir()
	announce := &wire.TraceTask{Task: mergeLoadTask, Kind: "mergeload"}
	for i, n := range nodes {
		announce.Ranks = append(announce.Ranks, wire.TraceRank{Rank: i, Node: n.ID})
	}
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			sh := NewShipper(ShipperConfig{Task: mergeLoadTask, Rank: i, Node: n.ID,
				Send: func(ctx context.Context, c *wire.TraceChunk) error {
					_, err := routers[i].Chunk(ctx, c)
					return err
				},
				LinkBytes: n.Node.BytesSent, SpillDir: spillDir, Options: trace.Options{NodeName: n.ID}})
			rk := rankLoad{node: n.ID, start: time.Now()}
			rk.spans = recordSteps(sh.Recorder(), i, len(nodes), rate, dur)
			rk.stop = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), shipWait)
			defer cancel()
			rk.err = sh.Finish(ctx)
			rk.finished, rk.recDropped = time.Now(), sh.Recorder().Dropped()
			if i == 0 {
				if _, err := routers[0].Task(ctx, announce); err != nil {
					tb.Errorf("announce: %v", err)
				}
			}
			out[i] = rk
		})
	}
	wg.Wait()
	return out
}

// stepKids are the children of a decode step.
var stepKids = []struct {
	name, cat string
	bytes     int64
}{{"attn", "compute", 0}, {"ffn", "compute", 0}, {"allreduce", "comms", 64 << 10}}

// recordSteps records decode steps on rec at rate spans/s for dur and
// returns the spans recorded. It catches up at most 10 ms of spans at a
// time, so that it stops on time when the machine cannot keep up.
func recordSteps(rec *trace.Recorder, rank, ranks, rate int, dur time.Duration) int {
	start := time.Now()
	n, tok := 0, 0
	for {
		el := time.Since(start)
		if el >= dur {
			return n
		}
		due := min(int(el.Seconds()*float64(rate)), n+max(rate/100, spansPerStep))
		for n < due {
			step := rec.Start("decode", "decode")
			for _, k := range stepKids {
				c := step.Child(k.name, k.cat)
				a := trace.Args{}.WithToken(tok)
				if k.bytes > 0 {
					a = a.WithBytes(k.bytes).WithPeer((rank + 1) % ranks)
				}
				c.End(a)
			}
			step.End(trace.Args{}.WithToken(tok))
			n += spansPerStep
			tok++
		}
		time.Sleep(time.Millisecond)
	}
}

// check asserts what must hold after a run: every span merged from every
// rank, none dropped, the heartbeats never silent for FailAfter, the
// cluster whole with the same master in the same term.
func (r *mergeLoad) check(tb testing.TB, res Result, save *saveRecord, nodes []*clustertest.Node, term uint64, masters []int) {
	tb.Helper()
	save.mu.Lock()
	calls, path, info := save.calls, save.path, save.info
	r.info, r.chromeBytes = save.info, save.size
	r.times.saveStart, r.times.saveEnd = save.start, save.end
	save.mu.Unlock()
	if r.times.mergeStart.IsZero() { // not seen: the poll missed the task
		r.times.mergeStart = r.times.saveStart
	}
	if calls != 1 || save.err != nil || res.Err != nil {
		tb.Fatalf("%d saves on the master (want 1): %v %v", calls, save.err, res.Err)
	}
	r.checkCluster(tb, nodes, term, masters)
	// Every span must be in the file: read it back (after the cluster's
	// checks: a large file keeps the process's CPUs busy a while).
	n, perRank, err := spansInFile(path)
	if err != nil {
		tb.Fatalf("read the saved trace back: %v", err)
	}
	r.spans = n
	want := 0
	for i, rk := range r.ranks {
		want += rk.spans
		if rk.err != nil || rk.recDropped != 0 {
			tb.Errorf("rank %d on %s: shipping: %v; recorder dropped %d", i, rk.node, rk.err, rk.recDropped)
		}
		if got := perRank[rankOn{i, rk.node}]; got != rk.spans {
			tb.Errorf("rank %d on %s: %d spans merged, %d recorded", i, rk.node, got, rk.spans)
		}
	}
	if res.Spans != want || r.spans != want || len(res.Missing) != 0 || len(info.Missing) != 0 || info.Dropped != 0 {
		tb.Errorf("merged %d spans (saved %d), missing %v, dropped %d; want all %d, none missing or dropped",
			res.Spans, r.spans, res.Missing, info.Dropped, want)
	}
}

// checkCluster asserts that the heartbeats were never silent for
// FailAfter and that the cluster stayed whole, with the same master in
// the same term.
func (r *mergeLoad) checkCluster(tb testing.TB, nodes []*clustertest.Node, term uint64, masters []int) {
	tb.Helper()
	for k, bs := range r.beats {
		gaps := gapsIn(bs, r.times.idleStart, r.times.end)
		if len(bs) == 0 || gaps.n == 0 {
			tb.Errorf("%s heard no heartbeats from %s during the run", k.to, k.from)
			continue
		}
		if gaps.max >= r.failAfter || r.times.end.Sub(bs[len(bs)-1].recv) >= r.failAfter {
			tb.Errorf("%s heard no heartbeat from %s for %v (max gap), over FailAfter %v", k.to, k.from, gaps.max, r.failAfter)
		}
	}
	if want := len(nodes) * (len(nodes) - 1); len(r.beats) != want {
		tb.Errorf("heartbeats on %d links, want %d", len(r.beats), want)
	}
	for i, n := range nodes {
		st := n.Node.Status()
		if st.MasterID != nodes[0].ID || st.Term != term || len(st.Members) != len(nodes) {
			tb.Errorf("%s: master %s term %d, %d members; want %s term %d, %d members",
				n.ID, st.MasterID, st.Term, len(st.Members), nodes[0].ID, term, len(nodes))
		}
		if m := n.App.Masters(); len(m) != masters[i] || len(n.App.Gone()) != 0 {
			tb.Errorf("%s: master changes %v, members gone %v during the load", n.ID, m, n.App.Gone())
		}
	}
}
