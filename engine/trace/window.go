package trace

import (
	"cmp"
	"math"
	"slices"
)

// Window is what a timeline needs to draw [From, To] of a trace, To-From
// spread over Px pixel columns: every span at least a pixel wide, and the
// narrower ones merged per lane, depth and run of touching columns (so
// that a million tokens' spans draw as a few thousand rectangles); counter
// samples thinned to a few per column; flows, one per column and pair of
// lanes. Times are µs since the trace's first span (T0 is always 0).
type Window struct {
	T0     float64         `json:"t0"`
	T1     float64         `json:"t1"`
	From   float64         `json:"from"`
	To     float64         `json:"to"`
	Px     int             `json:"px"`
	Spans  int             `json:"spanCount"` // in the whole trace
	Drawn  int             `json:"drawn"`     // spans in the window, merged or not
	Names  []string        `json:"names"`
	Lanes  []WindowLane    `json:"lanes"`
	Counts []WindowCounter `json:"counters"`
	Arrows []WindowArrow   `json:"arrows"`
}

// WindowLane is one lane: a node's rank, or one of its lanes.
type WindowLane struct {
	Process string       `json:"process"` // the node's friendly name
	Node    string       `json:"node"`
	Thread  string       `json:"thread"` // "rank 2", "rank 2 io"
	Rank    int          `json:"rank"`
	Depths  int          `json:"depths"` // nesting rows, over the whole trace
	Spans   []WindowSpan `json:"spans"`  // by start
}

// WindowSpan is a span, or a run of spans each under a pixel wide merged
// into one (Merged > 1; then Name and Cat are its first span's).
type WindowSpan struct {
	Start  float64 `json:"s"` // µs
	Dur    float64 `json:"d"`
	Depth  int     `json:"k"`
	Name   int     `json:"n"` // into Window.Names
	Cat    int     `json:"c"`
	Merged int     `json:"m,omitempty"`
	// Args are a lone span's (rank, bytes, peer, token, flowOut, flowIn).
	Args map[string]int64 `json:"a,omitempty"`
}

// WindowCounter is one counter track ("memory bytes" on a node). Min and
// Max are over the whole trace, so that its scale holds while panning.
type WindowCounter struct {
	// Name ends with the unit, when there is one ("memory bytes").
	Name string `json:"name"`
	// Unit is the series' unit ("bytes", "MB/s"; "" for none), for the
	// axis labels.
	Unit    string       `json:"unit,omitempty"`
	Process string       `json:"process"`
	Node    string       `json:"node"`
	Min     float64      `json:"min"`
	Max     float64      `json:"max"`
	Points  [][2]float64 `json:"points"` // (µs, value) by time, from the last sample before From
}

// WindowArrow is a flow from a send to its receive.
type WindowArrow struct {
	From WindowArrowEnd `json:"from"`
	To   WindowArrowEnd `json:"to"`
}

// WindowArrowEnd is where an arrow starts or ends.
type WindowArrowEnd struct {
	Lane  int     `json:"lane"`
	T     float64 `json:"t"`
	Depth int     `json:"depth"`
}

// MaxWindowPx bounds a window's width.
const MaxWindowPx = 16384

// maxWindowUs bounds a window's ends on either side of the trace's start
// (11.6 days): their nanoseconds must fit an int64 beside the start's.
const maxWindowUs = 1e12

// Window returns [from, to] (µs since the trace's start) at px columns.
// from ≥ to asks for the whole trace; from and to are clamped to ±11.6
// days, px to [1, MaxWindowPx].
func (x *Index) Window(from, to float64, px int) Window {
	px = min(max(px, 1), MaxWindowPx)
	dur := float64(x.t1-x.t0) / 1e3
	if !(from < to) || math.IsInf(from, 0) || math.IsInf(to, 0) {
		from, to = 0, dur
	}
	from, to = min(max(from, -maxWindowUs), maxWindowUs), min(max(to, -maxWindowUs), maxWindowUs)
	if to <= from { // an empty trace, or a single instant
		to = from + 1
	}
	w := Window{T1: dur, From: from, To: to, Px: px, Spans: len(x.t.Spans), Names: []string{},
		Lanes: make([]WindowLane, len(x.lanes)), Counts: []WindowCounter{}, Arrows: []WindowArrow{}}
	fromNs, toNs := x.t0+int64(math.Floor(from*1e3)), x.t0+int64(math.Ceil(to*1e3))
	perNs := float64(px) / float64(toNs-fromNs) // columns per ns
	names := map[string]int{}
	str := func(s string) int {
		i, ok := names[s]
		if !ok {
			i = len(w.Names)
			names[s] = i
			w.Names = append(w.Names, s)
		}
		return i
	}
	us := func(ns int64) float64 { return float64(ns-x.t0) / 1e3 }
	for li := range x.lanes {
		w.Lanes[li], w.Drawn = x.windowLane(li, fromNs, toNs, perNs, str, us, w.Drawn)
	}
	for i := range x.counters {
		w.Counts = append(w.Counts, x.windowCounter(i, fromNs, toNs, perNs, us))
	}
	w.Arrows = x.windowArrows(fromNs, toNs, perNs, us)
	return w
}

func (x *Index) windowLane(li int, fromNs, toNs int64, perNs float64, str func(string) int, us func(int64) float64, drawn int) (WindowLane, int) {
	ln := &x.lanes[li]
	spans := x.t.Spans
	wl := WindowLane{Process: ln.process, Node: ln.key.node, Thread: ln.thread, Rank: ln.key.rank, Depths: ln.depths, Spans: []WindowSpan{}}
	// open[d] is the merged run being built at depth d (-1: none), and
	// runEnd[d] its last column.
	open := make([]int, ln.depths)
	runEnd := make([]float64, ln.depths)
	for d := range open {
		open[d] = -1
	}
	for i := ln.first(spans, fromNs); i < len(ln.order); i++ {
		s := &spans[ln.order[i]]
		if s.StartNs > toNs {
			break
		}
		end := s.EndNs()
		if end < fromNs {
			continue
		}
		drawn++
		d := int(ln.depth[i])
		x0, x1 := float64(s.StartNs-fromNs)*perNs, float64(end-fromNs)*perNs
		if x1-x0 < 1 {
			if r := open[d]; r >= 0 && math.Floor(x0) <= runEnd[d] {
				ws := &wl.Spans[r]
				ws.Dur = max(ws.Dur, us(end)-ws.Start)
				ws.Merged++
				ws.Args = nil
				runEnd[d] = max(runEnd[d], math.Floor(x1))
				continue
			}
			open[d], runEnd[d] = len(wl.Spans), math.Floor(x1)
		} else {
			open[d] = -1
		}
		wl.Spans = append(wl.Spans, WindowSpan{Start: us(s.StartNs), Dur: float64(s.DurNs) / 1e3, Depth: d,
			Name: str(s.Name), Cat: str(s.Cat), Merged: 1, Args: spanArgs(s)})
	}
	for i := range wl.Spans {
		if wl.Spans[i].Merged == 1 {
			wl.Spans[i].Merged = 0
		}
	}
	return wl, drawn
}

// spanArgs are a span's args as the Chrome trace writes them.
func spanArgs(s *Span) map[string]int64 {
	a := map[string]int64{"rank": int64(s.Rank)}
	if s.Args.Has&ArgBytes != 0 {
		a["bytes"] = s.Args.Bytes
	}
	if s.Args.Has&ArgPeer != 0 {
		a["peer"] = int64(s.Args.Peer)
	}
	if s.Args.Has&ArgToken != 0 {
		a["token"] = int64(s.Args.Token)
	}
	if id := s.Args.FlowOut(); id != 0 {
		a["flowOut"] = int64(id)
	}
	if id := s.Args.FlowIn(); id != 0 {
		a["flowIn"] = int64(id)
	}
	return a
}

// windowCounter thins a counter track to its first, lowest, highest and
// last sample in each column, from the last sample before the window (its
// value holds into it) to the first after.
func (x *Index) windowCounter(i int, fromNs, toNs int64, perNs float64, us func(int64) float64) WindowCounter {
	c := &x.counters[i]
	name := c.name
	if c.unit != "" {
		name += " " + c.unit
	}
	wc := WindowCounter{Name: name, Unit: c.unit, Process: c.process, Node: c.node, Min: c.min, Max: c.max, Points: [][2]float64{}}
	lo, _ := slices.BinarySearch(c.ts, fromNs)
	lo = max(lo-1, 0)
	hi, _ := slices.BinarySearch(c.ts, toNs+1)
	hi = min(hi+1, len(c.ts))
	col, first := math.Inf(-1), lo
	flush := func(end int) {
		if end <= first {
			return
		}
		lo, hi := first, first
		for j := first; j < end; j++ {
			if c.v[j] < c.v[lo] {
				lo = j
			}
			if c.v[j] > c.v[hi] {
				hi = j
			}
		}
		keep := []int{first, min(lo, hi), max(lo, hi), end - 1}
		prev := -1
		for _, j := range keep {
			if j > prev {
				wc.Points = append(wc.Points, [2]float64{us(c.ts[j]), c.v[j]})
				prev = j
			}
		}
	}
	for j := lo; j < hi; j++ {
		if cj := math.Floor(float64(c.ts[j]-fromNs) * perNs); cj != col {
			flush(j)
			col, first = cj, j
		}
	}
	flush(hi)
	return wc
}

// windowArrows are the arrows that cross the window, one per pair of lanes
// and column of their start.
func (x *Index) windowArrows(fromNs, toNs int64, perNs float64, us func(int64) float64) []WindowArrow {
	out := []WindowArrow{}
	type key struct {
		from, to int32
		col      int64
	}
	seen := map[key]bool{}
	// From the first arrow starting at or after fromNs-maxArrow.
	lo, _ := slices.BinarySearchFunc(x.arrows, fromNs-x.maxArrow, func(a indexArrow, t int64) int { return cmp.Compare(a.from.ts, t) })
	for _, a := range x.arrows[lo:] {
		if a.from.ts > toNs {
			break
		}
		if max(a.from.ts, a.to.ts) < fromNs || min(a.from.ts, a.to.ts) > toNs {
			continue
		}
		k := key{a.from.lane, a.to.lane, int64(math.Floor(float64(a.from.ts-fromNs) * perNs))}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, WindowArrow{
			From: WindowArrowEnd{Lane: int(a.from.lane), T: us(a.from.ts), Depth: int(a.from.depth)},
			To:   WindowArrowEnd{Lane: int(a.to.lane), T: us(a.to.ts), Depth: int(a.to.depth)},
		})
	}
	return out
}
