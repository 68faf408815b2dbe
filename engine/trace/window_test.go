package trace_test

import (
	"encoding/json"
	"testing"

	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/engine/trace/tracetest"
)

// A small trace with known nesting: rank 0 holds "token" [0,100) µs with
// "compute" [10,60) and "send" [60,90) inside; rank 1 has "recv" [80,95).
// send → recv is a flow; memory is sampled on node a.
func smallTrace() *trace.Trace {
	us := func(v int64) int64 { return v * 1000 }
	return &trace.Trace{
		Processes: map[string]string{"a": "alpha", "b": "beta"},
		Spans: []trace.Span{
			{Name: "compute", Cat: "decode/compute", Node: "a", Rank: 0, StartNs: us(10), DurNs: us(50)},
			{Name: "token", Cat: "decode", Node: "a", Rank: 0, StartNs: us(0), DurNs: us(100)},
			{Name: "send", Cat: "decode/send", Node: "a", Rank: 0, StartNs: us(60), DurNs: us(30), Args: trace.Args{}.WithBytes(64).WithFlowOut(7)},
			{Name: "recv", Cat: "decode/recv", Node: "b", Rank: 1, StartNs: us(80), DurNs: us(15), Args: trace.Args{}.WithFlowIn(7)},
		},
		Counters: []trace.CounterSample{
			{Node: "a", Name: "memory", Unit: "bytes", TsNs: us(50), Value: 5},
			{Node: "a", Name: "memory", Unit: "bytes", TsNs: us(0), Value: 3},
		},
	}
}

func TestWindowWhole(t *testing.T) {
	x := trace.NewIndex(smallTrace())
	w := x.Window(0, 0, 1000)
	if w.T1 != 100 || w.From != 0 || w.To != 100 || w.Spans != 4 || w.Drawn != 4 {
		t.Fatalf("window %+v", w)
	}
	if len(w.Lanes) != 2 || w.Lanes[0].Process != "alpha" || w.Lanes[0].Thread != "rank 0" || w.Lanes[1].Process != "beta" || w.Lanes[1].Depths != 1 {
		t.Fatalf("lanes %+v", w.Lanes)
	}
	l0 := w.Lanes[0]
	if l0.Depths != 2 || len(l0.Spans) != 3 {
		t.Fatalf("rank 0: %+v", l0)
	}
	want := []struct {
		name       string
		start, dur float64
		depth      int
	}{{"token", 0, 100, 0}, {"compute", 10, 50, 1}, {"send", 60, 30, 1}}
	for i, ws := range l0.Spans {
		if w.Names[ws.Name] != want[i].name || ws.Start != want[i].start || ws.Dur != want[i].dur || ws.Depth != want[i].depth || ws.Merged != 0 {
			t.Errorf("span %d: %+v (%s), want %+v", i, ws, w.Names[ws.Name], want[i])
		}
	}
	if a := l0.Spans[2].Args; a["bytes"] != 64 || a["flowOut"] != 7 || a["rank"] != 0 {
		t.Errorf("send args %v", a)
	}
	if len(w.Arrows) != 1 || w.Arrows[0].From != (trace.WindowArrowEnd{Lane: 0, T: 60, Depth: 1}) || w.Arrows[0].To != (trace.WindowArrowEnd{Lane: 1, T: 95, Depth: 0}) {
		t.Errorf("arrows %+v", w.Arrows)
	}
	if len(w.Counts) != 1 || w.Counts[0].Name != "memory bytes" || w.Counts[0].Min != 3 || w.Counts[0].Max != 5 ||
		len(w.Counts[0].Points) != 2 || w.Counts[0].Points[0] != [2]float64{0, 3} {
		t.Errorf("counters %+v", w.Counts)
	}
	if _, err := json.Marshal(w); err != nil {
		t.Fatal(err)
	}
}

// Zoomed in, a window keeps the spans that overlap it, cut nothing, and
// leaves out the rest.
func TestWindowZoom(t *testing.T) {
	x := trace.NewIndex(smallTrace())
	w := x.Window(62, 70, 800)
	got := map[string]bool{}
	for _, l := range w.Lanes {
		for _, s := range l.Spans {
			got[w.Names[s.Name]] = true
		}
	}
	if !got["token"] || !got["send"] || got["compute"] || got["recv"] || len(got) != 2 {
		t.Fatalf("spans in [62,70]: %v", got)
	}
	// The memory sample before the window holds into it.
	if p := w.Counts[0].Points; len(p) != 1 || p[0] != [2]float64{50, 5} {
		t.Errorf("counter points %v", p)
	}
	if len(w.Arrows) != 1 {
		t.Errorf("the send→recv arrow crosses the window: %+v", w.Arrows)
	}
}

// At a million spans, a window's size is bounded by its width: the spans
// under a pixel are merged, and every span is counted once.
func TestWindowBounded(t *testing.T) {
	tr := tracetest.Pipeline(tracetest.PipelineConfig{Spans: 200_000, Ranks: 3, Flows: true, Counters: true})
	x := trace.NewIndex(tr)
	const px = 1000
	d := x.Window(0, 0, px).T1
	for _, tc := range []struct{ from, to float64 }{{0, 0}, {d * 0.45, d * 0.55}, {d * 0.5, d*0.5 + 1000}} {
		w := x.Window(tc.from, tc.to, px)
		items, counted := 0, 0
		for _, l := range w.Lanes {
			items += len(l.Spans)
			prev := -1.0
			for _, s := range l.Spans {
				counted += max(s.Merged, 1)
				if s.Start < prev-1e-9 && s.Depth == 0 {
					t.Fatalf("lane %s: spans out of order", l.Thread)
				}
				prev = s.Start
				if s.Start > w.To || s.Start+s.Dur < w.From {
					t.Fatalf("span %+v outside [%v,%v]", s, w.From, w.To)
				}
			}
			// Per depth row, each column starts at most one merged run and
			// one lone span (a wider span ends a run).
			if limit := l.Depths * 2 * (px + 1); len(l.Spans) > limit {
				t.Errorf("lane %s: %d items, over %d", l.Thread, len(l.Spans), limit)
			}
		}
		if counted != w.Drawn {
			t.Errorf("[%v,%v]: the items stand for %d spans, the window has %d", tc.from, tc.to, counted, w.Drawn)
		}
		if tc.to == 0 && w.Drawn != len(tr.Spans) {
			t.Errorf("the whole window holds %d of %d spans", w.Drawn, len(tr.Spans))
		}
		for _, c := range w.Counts {
			if len(c.Points) > 4*(px+2) {
				t.Errorf("counter %s: %d points", c.Name, len(c.Points))
			}
		}
		t.Logf("[%v,%v] of %v µs: %d spans drawn as %d items, %d arrows", tc.from, tc.to, w.T1, w.Drawn, items, len(w.Arrows))
	}
}

func BenchmarkWindow1M(b *testing.B) {
	tr := tracetest.Pipeline(tracetest.PipelineConfig{Spans: 1_000_000, Ranks: 3, Flows: true, Counters: true})
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			trace.NewIndex(tr)
		}
	})
	x := trace.NewIndex(tr)
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			x.Window(0, 0, 1600)
		}
	})
	w := x.Window(0, 0, 1600)
	b.Run("tenth", func(b *testing.B) {
		for b.Loop() {
			x.Window(w.T1*0.45, w.T1*0.55, 1600)
		}
	})
}

// From and to come from a URL's query: any finite values give a window
// (nanoseconds past the trace's start would overflow an int64 beyond
// 9.2e12 µs), holding the spans they reach.
func TestWindowFarOut(t *testing.T) {
	x := trace.NewIndex(smallTrace())
	for _, tc := range []struct {
		from, to float64
		drawn    int
	}{{1e300, 2e300, 0}, {-1e300, 1e300, 4}, {-1e300, -1e299, 0}, {-1e300, 50, 2}, {50, 1e300, 4}, {1e17, 1e18, 0}} {
		w := x.Window(tc.from, tc.to, 100)
		if w.Drawn != tc.drawn || !(w.From < w.To) {
			t.Errorf("[%g, %g]: %d spans in [%g, %g], want %d", tc.from, tc.to, w.Drawn, w.From, w.To, tc.drawn)
		}
		if _, err := json.Marshal(w); err != nil {
			t.Errorf("[%g, %g]: %v", tc.from, tc.to, err)
		}
	}
}
