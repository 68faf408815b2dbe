package trace

import (
	"cmp"
	"math"
	"slices"
	"strconv"
)

// An Index is a trace prepared for drawing windows of it (Window): spans
// grouped into the timeline's lanes (one per node, rank and lane), each
// lane in start order with every span's nesting depth; counter tracks in
// time order; flows as arrows between lanes. Building it costs a pass over
// the spans (and a sort where they are out of order); a window then costs
// a pass over the spans in view, and its size is bounded by its width in
// pixels, not by the trace.
type Index struct {
	t        *Trace
	lanes    []indexLane
	counters []indexCounter
	arrows   []indexArrow // by start time
	maxArrow int64        // the longest arrow's time span: bounds the search
	t0, t1   int64        // ns: the first start and the last end
}

type indexLane struct {
	key     threadKey
	process string
	thread  string
	order   []int32 // into t.Spans, by start (then longest first)
	depth   []uint8 // of order[i]
	depths  int
	maxDur  int64
}

type indexCounter struct {
	node, name, unit string
	process          string
	ts               []int64
	v                []float64
	min, max         float64
}

type arrowEnd struct {
	lane  int32
	depth uint8
	ts    int64
}

type indexArrow struct{ from, to arrowEnd }

// maxDepth bounds the nesting a lane shows; deeper spans draw on the last
// row.
const maxDepth = 255

// NewIndex prepares t for Window. It keeps t, which must not change after.
func NewIndex(t *Trace) *Index {
	x := &Index{t: t, t0: math.MaxInt64, t1: math.MinInt64}
	l := newLayout(t)
	laneOf := map[threadKey]int32{}
	keys := make([]threadKey, 0, len(l.threads))
	for k := range l.threads {
		keys = append(keys, k)
	}
	// A rank's main lane first, by rank and then node: the pipeline reads
	// top to bottom, as in Perfetto with tid = rank.
	slices.SortFunc(keys, func(a, b threadKey) int {
		return cmp.Or(cmp.Compare(boolInt(a.lane != ""), boolInt(b.lane != "")), cmp.Compare(a.rank, b.rank),
			cmp.Compare(l.pid[a.node], l.pid[b.node]), cmp.Compare(a.lane, b.lane))
	})
	for i, k := range keys {
		laneOf[k] = int32(i)
		thread := "rank " + strconv.Itoa(k.rank)
		if k.lane != "" {
			thread += " " + k.lane
		}
		x.lanes = append(x.lanes, indexLane{key: k, process: processName(t, k.node), thread: thread})
	}
	var last threadKey
	lastLane := int32(-1)
	for i := range t.Spans {
		s := &t.Spans[i]
		if k := (threadKey{s.Node, s.Rank, s.Lane}); lastLane < 0 || k != last {
			last, lastLane = k, laneOf[k]
		}
		ln := &x.lanes[lastLane]
		ln.order = append(ln.order, int32(i))
		x.t0, x.t1 = min(x.t0, s.StartNs), max(x.t1, s.EndNs())
	}
	for i := range x.lanes {
		x.lanes[i].nest(t.Spans)
	}
	x.indexCounters(t)
	x.indexArrows(t, laneOf)
	if x.t0 > x.t1 {
		x.t0, x.t1 = 0, 0
	}
	return x
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func processName(t *Trace, node string) string {
	if n := t.Processes[node]; n != "" {
		return n
	}
	return node
}

// nest sorts the lane by start, longest first on a tie, and gives each span
// its depth: one below every span still open at its start.
func (ln *indexLane) nest(spans []Span) {
	less := func(a, b int32) int {
		sa, sb := &spans[a], &spans[b]
		return cmp.Or(cmp.Compare(sa.StartNs, sb.StartNs), cmp.Compare(sb.DurNs, sa.DurNs), cmp.Compare(a, b))
	}
	if !slices.IsSortedFunc(ln.order, less) {
		slices.SortFunc(ln.order, less)
	}
	ln.depth = make([]uint8, len(ln.order))
	var open []int64 // ends of the open spans, innermost last
	ln.depths = 1
	for i, si := range ln.order {
		s := &spans[si]
		for len(open) > 0 && open[len(open)-1] <= s.StartNs {
			open = open[:len(open)-1]
		}
		ln.depth[i] = uint8(min(len(open), maxDepth))
		if len(open) < maxDepth {
			open = append(open, s.EndNs())
		}
		ln.depths = max(ln.depths, len(open))
		ln.maxDur = max(ln.maxDur, s.DurNs)
	}
}

func (x *Index) indexCounters(t *Trace) {
	type key struct{ node, name, unit string }
	at := map[key]int{}
	for i := range t.Counters {
		c := &t.Counters[i]
		k := key{c.Node, c.Name, c.Unit}
		j, ok := at[k]
		if !ok {
			j = len(x.counters)
			at[k] = j
			x.counters = append(x.counters, indexCounter{node: c.Node, name: c.Name, unit: c.Unit, process: processName(t, c.Node),
				min: math.Inf(1), max: math.Inf(-1)})
		}
		ic := &x.counters[j]
		ic.ts = append(ic.ts, c.TsNs)
		ic.v = append(ic.v, c.Value)
		ic.min, ic.max = min(ic.min, c.Value), max(ic.max, c.Value)
	}
	for i := range x.counters {
		c := &x.counters[i]
		if !slices.IsSorted(c.ts) {
			idx := make([]int, len(c.ts))
			for j := range idx {
				idx[j] = j
			}
			slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(c.ts[a], c.ts[b]) })
			ts, v := make([]int64, len(idx)), make([]float64, len(idx))
			for j, k := range idx {
				ts[j], v[j] = c.ts[k], c.v[k]
			}
			c.ts, c.v = ts, v
		}
	}
	slices.SortStableFunc(x.counters, func(a, b indexCounter) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.name+" "+a.unit, b.name+" "+b.unit))
	})
}

// indexArrows pairs each flow's start (a send span's start, or an "s"
// event) with its end (a receive span's end, or an "f" event), and sorts
// the arrows by their start: each lane's come in that order already, so
// the lanes' runs are merged.
func (x *Index) indexArrows(t *Trace, laneOf map[threadKey]int32) {
	n := len(t.Flows)
	for i := range t.Spans {
		if t.Spans[i].Args.Has&ArgFlowIn != 0 {
			n++
		}
	}
	ends := make(map[uint64]arrowEnd, n)
	for li := range x.lanes {
		ln := &x.lanes[li]
		for i, si := range ln.order {
			s := &t.Spans[si]
			if id := s.Args.FlowIn(); id != 0 {
				ends[id] = arrowEnd{lane: int32(li), depth: ln.depth[i], ts: s.EndNs()}
			}
		}
	}
	var loose []indexArrow // from "s" events, in no particular order
	starts := map[uint64]arrowEnd{}
	for i := range t.Flows {
		f := &t.Flows[i]
		li, ok := laneOf[threadKey{f.Node, f.Rank, f.Lane}]
		if !ok {
			continue
		}
		e := arrowEnd{lane: li, depth: x.lanes[li].depthAt(t.Spans, f.TsNs), ts: f.TsNs}
		if f.Phase == FlowStart {
			starts[f.ID] = e
		} else {
			ends[f.ID] = e
		}
	}
	runs := make([][]indexArrow, 0, len(x.lanes)+1)
	for li := range x.lanes {
		ln := &x.lanes[li]
		var run []indexArrow
		for i, si := range ln.order {
			s := &t.Spans[si]
			if id := s.Args.FlowOut(); id != 0 {
				if e, ok := ends[id]; ok {
					run = append(run, indexArrow{arrowEnd{lane: int32(li), depth: ln.depth[i], ts: s.StartNs}, e})
				}
			}
		}
		runs = append(runs, run)
	}
	for id, s := range starts {
		if e, ok := ends[id]; ok {
			loose = append(loose, indexArrow{s, e})
		}
	}
	slices.SortFunc(loose, func(a, b indexArrow) int {
		return cmp.Or(cmp.Compare(a.from.ts, b.from.ts), cmp.Compare(a.from.lane, b.from.lane), cmp.Compare(a.to.ts, b.to.ts))
	})
	x.arrows = mergeRuns(append(runs, loose))
	for _, a := range x.arrows {
		x.maxArrow = max(x.maxArrow, abs64(a.to.ts-a.from.ts))
	}
}

// mergeRuns merges runs each sorted by start into one sorted by start
// (ties: the earlier run first).
func mergeRuns(runs [][]indexArrow) []indexArrow {
	n := 0
	for _, r := range runs {
		n += len(r)
	}
	out := make([]indexArrow, 0, n)
	if len(runs) > 16 { // many lanes: a sort beats picking among them
		for _, r := range runs {
			out = append(out, r...)
		}
		slices.SortStableFunc(out, func(a, b indexArrow) int { return cmp.Compare(a.from.ts, b.from.ts) })
		return out
	}
	at := make([]int, len(runs))
	for len(out) < n {
		best := -1
		for k, r := range runs {
			if at[k] < len(r) && (best < 0 || r[at[k]].from.ts < runs[best][at[best]].from.ts) {
				best = k
			}
		}
		out = append(out, runs[best][at[best]])
		at[best]++
	}
	return out
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// first is the index of the lane's first span that may overlap a time at or
// after ts.
func (ln *indexLane) first(spans []Span, ts int64) int {
	lo := ts - ln.maxDur
	i, _ := slices.BinarySearchFunc(ln.order, lo, func(si int32, t int64) int { return cmp.Compare(spans[si].StartNs, t) })
	return i
}

// depthAt is the depth of the innermost span open at ts (0 when none).
func (ln *indexLane) depthAt(spans []Span, ts int64) uint8 {
	var d uint8
	for i := ln.first(spans, ts); i < len(ln.order) && spans[ln.order[i]].StartNs <= ts; i++ {
		if spans[ln.order[i]].EndNs() >= ts {
			d = max(d, ln.depth[i])
		}
	}
	return d
}
