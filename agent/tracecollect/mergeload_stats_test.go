package tracecollect

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// The merge load test's instruments (mergeload_test.go): the master's
// Save, a watch on the collector, the heartbeats heard, GC figures, and
// the report.

// rankOn is a rank and the node its spans came from.
type rankOn struct {
	rank int
	node string
}

// saveRecord is the master's Save: it writes the Chrome trace to a file,
// as the agent's trace store does, and records when and what.
type saveRecord struct {
	mu         sync.Mutex
	calls      int
	start, end time.Time
	path       string
	info       Info
	size       int64
	err        error
}

func (s *saveRecord) save(dir string) func(*Merged, Info) error {
	return func(m *Merged, info Info) error {
		start := time.Now()
		path := filepath.Join(dir, m.TaskID+".json")
		err := atomicfile.WriteFunc(path, 0o600, m.WriteChrome)
		end := time.Now()
		var size int64
		if fi, serr := os.Stat(path); err == nil && serr == nil {
			size = fi.Size()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.calls++
		s.start, s.end, s.path, s.info, s.size, s.err = start, end, path, info, size, err
		return err
	}
}

// spansInFile reads the saved trace back (after the run: not to load the
// master's process meanwhile) and counts its spans per rank.
func spansInFile(path string) (int, map[rankOn]int, error) {
	tr, err := readTraceFile(path)
	if err != nil {
		return 0, nil, err
	}
	per := map[rankOn]int{}
	for i := range tr.Spans {
		per[rankOn{tr.Spans[i].Rank, tr.Spans[i].Node}]++
	}
	return len(tr.Spans), per, nil
}

// readTraceFile reads a Chrome trace file back, with room for a long run's
// spans.
func readTraceFile(path string) (*trace.Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return trace.ReadChromeLimits(f, trace.ReadLimits{MaxEvents: 1 << 30})
}

// heldSample is the spans the collector had received for the task by t
// (held in memory or spilled).
type heldSample struct {
	t    time.Time
	held int
}

// collectorWatch polls a collector every 2 ms: the spans it holds for a
// task, and when the task leaves the pending list (its merge starts).
type collectorWatch struct {
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
	samples []heldSample
	merge   time.Time
}

func watchCollector(c *Collector, task string) *collectorWatch {
	w := &collectorWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		seen := false
		for {
			select {
			case <-w.done:
				return
			case now := <-t.C:
				c.mu.Lock()
				p, held := c.tasks[task], 0
				if p != nil {
					held = p.spans + p.spilled // in memory or on disk: received
				}
				c.mu.Unlock()
				switch {
				case p != nil:
					seen = true
					if len(w.samples) < maxHeldSamples {
						w.samples = append(w.samples, heldSample{now, held})
					}
				case seen:
					w.merge = now
					return
				}
			}
		}
	}()
	return w
}

// stop ends the watch and returns when the merge started and the samples.
func (w *collectorWatch) stop() (time.Time, []heldSample) {
	w.once.Do(func() { close(w.done) })
	<-w.stopped
	return w.merge, w.samples
}

// heldAt is the last sample at or before t.
func heldAt(ss []heldSample, t time.Time) int {
	n := 0
	for _, s := range ss {
		if s.t.After(t) {
			break
		}
		n = s.held
	}
	return n
}

type beatKey struct{ to, from string }

type beat struct{ sent, recv time.Time }

// beatLog keeps every heartbeat heard (clustertest.Options.OnHeartbeat).
type beatLog struct {
	mu sync.Mutex
	m  map[beatKey][]beat
}

func (l *beatLog) add(node, from string, sent, recv time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := beatKey{node, from}
	if len(l.m[k]) < maxBeats {
		l.m[k] = append(l.m[k], beat{sent, recv})
	}
}

func (l *beatLog) snapshot() map[beatKey][]beat {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[beatKey][]beat, len(l.m))
	for k, bs := range l.m {
		out[k] = slices.Clone(bs)
	}
	return out
}

// gapStats are the inter-arrival gaps of heartbeats in a window, the
// longest gap between their sending (the sender's ticks), and their
// one-way delays (same process: one clock).
type gapStats struct {
	n                  int
	p50, p99, max      time.Duration
	sentMax            time.Duration
	delayP50, delayMax time.Duration
}

// beatGaps are a window's gaps between heartbeats heard and between their
// sending, and the delays of the heartbeats that end them.
type beatGaps struct{ recv, sent, delay []time.Duration }

func (g *beatGaps) add(o beatGaps) {
	g.recv, g.sent, g.delay = append(g.recv, o.recv...), append(g.sent, o.sent...), append(g.delay, o.delay...)
}

// gapsIn takes the gaps between consecutive heartbeats that overlap
// [from, to]: a silence that starts before the window and ends in it
// counts.
func gapsIn(bs []beat, from, to time.Time) gapStats { return gapList(bs, from, to).stats() }

// gapList is gapsIn's gaps.
func gapList(bs []beat, from, to time.Time) beatGaps {
	var g beatGaps
	for i := 1; i < len(bs); i++ {
		prev, cur := bs[i-1].recv, bs[i].recv
		if cur.After(from) && prev.Before(to) {
			g.recv = append(g.recv, cur.Sub(prev))
			g.sent = append(g.sent, bs[i].sent.Sub(bs[i-1].sent))
			g.delay = append(g.delay, cur.Sub(bs[i].sent))
		}
	}
	return g
}

func (g beatGaps) stats() gapStats {
	if len(g.recv) == 0 {
		return gapStats{}
	}
	slices.Sort(g.recv)
	slices.Sort(g.delay)
	return gapStats{n: len(g.recv), p50: pct(g.recv, 50), p99: pct(g.recv, 99), max: g.recv[len(g.recv)-1],
		sentMax: slices.Max(g.sent), delayP50: pct(g.delay, 50), delayMax: g.delay[len(g.delay)-1]}
}

// pct is the p-th percentile (nearest rank) of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds) + 99) / 100
	return ds[min(max(i-1, 0), len(ds)-1)]
}

func (g gapStats) String() string {
	if g.n == 0 {
		return "no gaps"
	}
	return fmt.Sprintf("%4d %7.1f %7.1f %7.1f | %7.1f | %6.2f %7.2f",
		g.n, ms(g.p50), ms(g.p99), ms(g.max), ms(g.sentMax), ms(g.delayP50), ms(g.delayMax))
}

// followerGaps is the gaps of the master's heartbeats on all followers
// together, while the ranks ship and while the master merges.
func (r *mergeLoad) followerGaps() (shipping, merging gapStats) {
	return r.followerGapsIn(r.times.loadStart, r.times.shipped), r.followerGapsIn(r.times.shipped, r.times.saveEnd)
}

func (r *mergeLoad) followerGapsIn(from, to time.Time) gapStats {
	var g beatGaps
	for k, bs := range r.beats {
		if k.from == mergeLoadNodes[0] {
			g.add(gapList(bs, from, to))
		}
	}
	return g.stats()
}

// beatReport is the heartbeat gaps of every link, and of the master's
// heartbeats on all followers, idle, while the ranks ship and while the
// master merges.
func (r *mergeLoad) beatReport() []string {
	t := r.times
	out := []string{fmt.Sprintf("  heartbeat gaps (sent every %v), ms: gaps median p99 max | longest gap between their sending | one-way delay median max", r.heartbeat)}
	keys := make([]beatKey, 0, len(r.beats))
	for k := range r.beats {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b beatKey) int { return strings.Compare(a.to+a.from, b.to+b.from) })
	for _, w := range []struct {
		name     string
		from, to time.Time
	}{
		{"idle, before the load", t.idleStart, t.loadStart},
		{"shipping: the load's start → the last final chunk sent", t.loadStart, t.shipped},
		{"merging: the last final chunk sent → saved", t.shipped, t.saveEnd},
	} {
		out = append(out, fmt.Sprintf("    %s (%v; %s)", w.name, w.to.Sub(w.from).Round(time.Millisecond), cpuIn(r.os, w.from, w.to)))
		for _, k := range keys {
			out = append(out, fmt.Sprintf("      %s←%s        %v", k.to, k.from, gapsIn(r.beats[k], w.from, w.to)))
		}
		out = append(out, fmt.Sprintf("      followers←%s %v", mergeLoadNodes[0], r.followerGapsIn(w.from, w.to)))
	}
	return append(out, r.longestSilence())
}

// longestSilence places the longest gap of the master's heartbeats on a
// follower after the load started, against the run's phases.
func (r *mergeLoad) longestSilence() string {
	t := r.times
	var from, to time.Time
	for k, bs := range r.beats {
		for i := 1; k.from == mergeLoadNodes[0] && i < len(bs); i++ {
			if bs[i].recv.After(t.loadStart) && bs[i].recv.Sub(bs[i-1].recv) > to.Sub(from) {
				from, to = bs[i-1].recv, bs[i].recv
			}
		}
	}
	at := func(x time.Time) time.Duration { return x.Sub(t.loadStart).Round(time.Millisecond) }
	return fmt.Sprintf("  the master's longest silence: %v, from +%v to +%v; load until +%v, last final chunk sent +%v, "+
		"all received +%v, merged +%v, saved +%v", to.Sub(from).Round(time.Millisecond), at(from), at(to),
		at(t.loadEnd), at(t.shipped), at(t.mergeStart), at(t.saveStart), at(t.saveEnd))
}

// rtMetrics are the runtime's histograms a run reports: how long runnable
// goroutines waited for a thread, how long GC took to stop the world, and
// its pauses in all.
var rtMetrics = []string{"/sched/latencies:seconds", "/sched/pauses/stopping/gc:seconds", "/sched/pauses/total/gc:seconds"}

// runtimeSnap is what the runtime and the OS say of this process at one
// time.
type runtimeSnap struct {
	at    time.Time
	mem   runtime.MemStats
	hists []metrics.Sample
}

func readRuntime() runtimeSnap {
	s := runtimeSnap{at: time.Now(), hists: make([]metrics.Sample, len(rtMetrics))}
	for i, name := range rtMetrics {
		s.hists[i].Name = name
	}
	metrics.Read(s.hists)
	runtime.ReadMemStats(&s.mem)
	return s
}

// gcPause is one stop-the-world pause of the GC, ending at end.
type gcPause struct {
	end time.Time
	d   time.Duration
}

// runtimeStats are the runtime's figures over a run.
type runtimeStats struct {
	gcs                uint32
	pauseTotal         time.Duration
	long               []gcPause // pauses of 5 ms or more (of the last 256)
	heapSys            uint64
	schedP99, schedMax time.Duration // upper bounds of the buckets
	stopMax, pauseMax  time.Duration
}

// since is the runtime's figures from s0 to s.
func (s runtimeSnap) since(s0 runtimeSnap) runtimeStats {
	m, m0 := &s.mem, &s0.mem
	r := runtimeStats{gcs: m.NumGC - m0.NumGC, pauseTotal: time.Duration(m.PauseTotalNs - m0.PauseTotalNs),
		heapSys: m.HeapSys}
	for k := max(m0.NumGC+1, m.NumGC-min(m.NumGC, 255)); k <= m.NumGC && k > 0; k++ {
		if d := time.Duration(m.PauseNs[(k-1)%256]); d >= 5*time.Millisecond {
			r.long = append(r.long, gcPause{time.Unix(0, int64(m.PauseEnd[(k-1)%256])), d})
		}
	}
	r.schedP99, r.schedMax = histDelta(s0.hists[0], s.hists[0])
	_, r.stopMax = histDelta(s0.hists[1], s.hists[1])
	_, r.pauseMax = histDelta(s0.hists[2], s.hists[2])
	return r
}

// histDelta is the 99th percentile and the maximum of the samples a
// histogram got between two reads, as their buckets' upper bounds.
func histDelta(a, b metrics.Sample) (p99, top time.Duration) {
	if a.Value.Kind() != metrics.KindFloat64Histogram || b.Value.Kind() != metrics.KindFloat64Histogram {
		return 0, 0
	}
	h0, h := a.Value.Float64Histogram(), b.Value.Float64Histogram()
	if len(h0.Counts) != len(h.Counts) {
		return 0, 0
	}
	var total, seen uint64
	for i := range h.Counts {
		total += h.Counts[i] - h0.Counts[i]
	}
	bound := func(i int) time.Duration {
		v := h.Buckets[i+1]
		if math.IsInf(v, 1) {
			v = h.Buckets[i]
		}
		return time.Duration(v * float64(time.Second))
	}
	for i := range h.Counts {
		n := h.Counts[i] - h0.Counts[i]
		if n == 0 {
			continue
		}
		seen += n
		if p99 == 0 && seen*100 >= total*99 {
			p99 = bound(i)
		}
		top = bound(i)
	}
	return p99, top
}

func (r *mergeLoad) shipped() int {
	n := 0
	for _, rk := range r.ranks {
		n += rk.spans
	}
	return n
}

func (r *mergeLoad) loadTime() time.Duration { return r.times.loadEnd.Sub(r.times.loadStart) }

// report is the run's figures, one line each.
func (r *mergeLoad) report() []string {
	t := r.times
	out := []string{fmt.Sprintf("merge load: %d ranks × %d spans/s for %v; heartbeat %v, FailAfter %v; GOMAXPROCS %d",
		len(r.ranks), r.rate, r.dur, r.heartbeat, r.failAfter, runtime.GOMAXPROCS(0))}
	for i, rk := range r.ranks {
		d := rk.stop.Sub(rk.start)
		out = append(out, fmt.Sprintf("  rank %d on %s: %d spans in %v = %.0f spans/s; shipped %v after its load",
			i, rk.node, rk.spans, d.Round(time.Millisecond), float64(rk.spans)/d.Seconds(), rk.finished.Sub(rk.stop).Round(time.Millisecond)))
	}
	load := r.loadTime()
	atEnd := heldAt(r.held, t.loadEnd)
	out = append(out,
		fmt.Sprintf("  total: %d spans recorded and shipped in %v = %.0f spans/s", r.shipped(), load.Round(time.Millisecond), float64(r.shipped())/load.Seconds()),
		fmt.Sprintf("  collector: %d spans received during the load = %.0f spans/s (per second: %s); %d behind at its end (flush every %v)",
			atEnd, float64(atEnd)/load.Seconds(), r.perSecond(), r.shipped()-atEnd, DefaultFlushEvery),
		fmt.Sprintf("  collector: all %d spans in %v from the load's start = %.0f spans/s; last final chunk %v after the load",
			r.spans, t.mergeStart.Sub(t.loadStart).Round(time.Millisecond), float64(r.spans)/t.mergeStart.Sub(t.loadStart).Seconds(),
			t.shipped.Sub(t.loadEnd).Round(time.Millisecond)),
		fmt.Sprintf("  merge of %d spans: last final chunk sent → all received %v → Save called %v (merge: build, shift, sort) → saved %v (%.1f MB Chrome JSON); last chunk → Save %v",
			r.spans, t.mergeStart.Sub(t.shipped).Round(time.Millisecond), t.saveStart.Sub(t.mergeStart).Round(time.Millisecond),
			t.saveEnd.Sub(t.saveStart).Round(time.Millisecond), float64(r.chromeBytes)/1e6, t.saveStart.Sub(t.shipped).Round(time.Millisecond)),
		fmt.Sprintf("  dropped: %d (the task's memory budget %d spans, the rest spilled to disk); missing ranks %v", r.info.Dropped, r.taskSpans, r.info.Missing),
		r.rt.line(t))
	if need := len(r.ranks) * r.rate * int(r.dur/time.Millisecond) / 1000; need > trace.DefaultMaxBuffered {
		out = append(out, fmt.Sprintf("  NOTE: %d spans exceed the agent's collector limit (MaxSpans default %d): the agent would drop %d of them",
			need, trace.DefaultMaxBuffered, need-trace.DefaultMaxBuffered))
	}
	return append(out, r.beatReport()...)
}

// perSecond is the spans the collector received in each whole second of
// the load.
func (r *mergeLoad) perSecond() string {
	var parts []string
	for s := time.Duration(0); s+time.Second <= r.loadTime()+time.Millisecond; s += time.Second {
		a, b := r.times.loadStart.Add(s), r.times.loadStart.Add(s+time.Second)
		parts = append(parts, fmt.Sprint(heldAt(r.held, b)-heldAt(r.held, a)))
	}
	return strings.Join(parts, " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// line says what the runtime did during the run (t's times place the long
// GC pauses).
func (g runtimeStats) line(t mergeTimes) string {
	var long []string
	for _, p := range g.long {
		phase := "shipping"
		if p.end.After(t.shipped) {
			phase = "merging"
		}
		long = append(long, fmt.Sprintf("%v at +%v (%s)", p.d.Round(time.Millisecond), p.end.Sub(t.loadStart).Round(time.Millisecond), phase))
	}
	load := "n/a"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	return fmt.Sprintf("  runtime: %d GCs, pauses %v in all, ≥ 5 ms: %v; GC stop-the-world ≤ %v (stopping ≤ %v); "+
		"goroutine run delay p99 ≤ %v, max ≤ %v; heap %d MB; load average %s (%d CPUs)",
		g.gcs, g.pauseTotal.Round(time.Microsecond), long, g.pauseMax, g.stopMax, g.schedP99, g.schedMax, g.heapSys>>20, load, runtime.NumCPU())
}
