// Package tracetest builds synthetic traces for tests, benchmarks and the
// stats comparison script (scripts/stats-vs-python.sh).
package tracetest

import (
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// PipelineConfig shapes a synthetic pipeline-parallel inference trace.
type PipelineConfig struct {
	// Spans is the exact number of spans to produce.
	Spans int
	// Ranks is the pipeline depth (default 4).
	Ranks int
	// Nodes is the number of nodes the ranks are spread over (default
	// min(Ranks, 2)).
	Nodes int
	// Flows gives every send/receive pair a flow id.
	Flows bool
	// Counters adds a memory sample per node and a throughput sample per
	// link every 100 ms of trace time.
	Counters bool
	// Start is the time of the first span (default 2026-12-02T00:00:00Z).
	Start time.Time
}

// Pipeline returns a deterministic trace of a prompt and then tokens flowing
// through the ranks: per rank and step a "prefill"/"decode" span holding a
// recv (not on rank 0), a compute and a send (not on the last rank), with
// categories such as "decode/comms". Every time is a whole microsecond, so
// that loaders which read timestamps as floats (exo's) see the same values.
func Pipeline(cfg PipelineConfig) *trace.Trace {
	if cfg.Ranks <= 0 {
		cfg.Ranks = 4
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = min(cfg.Ranks, 2)
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	}
	g := newGenerator(cfg)
	var now int64 // µs
	nextSample := int64(0)
	for step := 0; len(g.t.Spans) < cfg.Spans; step++ {
		phase := "decode"
		if step == 0 {
			phase = "prefill"
		}
		for r := 0; r < cfg.Ranks; r++ {
			end, ok := g.rankStep(step, r, phase, now)
			if !ok {
				break
			}
			now = end
		}
		if cfg.Counters {
			nextSample = g.samples(nextSample, now)
		}
	}
	return g.t
}

// generator is Pipeline's state: the trace so far and the random source.
type generator struct {
	cfg    PipelineConfig
	t      *trace.Trace
	base   int64 // cfg.Start in ns
	nodeOf []string
	rng    uint64
	names  map[string]string // share name strings like a recorder does
}

func newGenerator(cfg PipelineConfig) *generator {
	g := &generator{
		cfg:  cfg,
		base: cfg.Start.UnixNano(),
		t: &trace.Trace{
			TaskID:    "synthetic",
			CreatedAt: cfg.Start,
			Processes: map[string]string{},
			Spans:     make([]trace.Span, 0, cfg.Spans),
		},
		nodeOf: make([]string, cfg.Ranks),
		rng:    0x9e3779b97f4a7c15,
		names:  map[string]string{},
	}
	for r := range g.nodeOf {
		g.nodeOf[r] = fmt.Sprintf("node-%c", 'a'+r*cfg.Nodes/cfg.Ranks)
		g.t.Processes[g.nodeOf[r]] = fmt.Sprintf("Mac %c", 'A'+r*cfg.Nodes/cfg.Ranks)
	}
	return g
}

// rand is xorshift64*, deterministic.
func (g *generator) rand(lo, hi int64) int64 {
	g.rng ^= g.rng >> 12
	g.rng ^= g.rng << 25
	g.rng ^= g.rng >> 27
	return lo + int64((g.rng*0x2545f4914f6cdd1d)>>33)%(hi-lo)
}

// add appends a span unless the trace already has cfg.Spans.
func (g *generator) add(name, cat string, rank int, startUs, durUs int64, a trace.Args) bool {
	if len(g.t.Spans) == g.cfg.Spans {
		return false
	}
	g.t.Spans = append(g.t.Spans, trace.Span{
		Name: name, Cat: cat, Node: g.nodeOf[rank], Rank: rank,
		StartNs: g.base + startUs*1000, DurNs: durUs * 1000, Args: a,
	})
	return true
}

func (g *generator) name(s string) string {
	if n, ok := g.names[s]; ok {
		return n
	}
	g.names[s] = s
	return s
}

// child is a span nested in a rank's step span.
type child struct {
	name, cat string
	s, d      int64
	a         trace.Args
}

// rankStep adds rank r's span for a step starting at now (µs) and its
// children: recv (not on rank 0), compute, send (not on the last rank). It
// returns the step's end, or false once the trace is full.
func (g *generator) rankStep(step, r int, phase string, now int64) (end int64, ok bool) {
	start := now
	cur := now
	var children [3]child
	nc := 0
	if r > 0 {
		d := g.rand(40, 160)
		var flow uint64
		if g.cfg.Flows {
			flow = trace.FlowKey(r-1, r, uint64(step))
		}
		children[nc] = child{g.name(fmt.Sprintf("recv %d", r-1)), phase + "/comms", cur, d, trace.Recv(r-1, 8192, flow)}
		nc++
		cur += d
	}
	d := g.rand(700, 1300)
	if phase == "prefill" {
		d *= 20
	}
	children[nc] = child{"joint_blocks", phase + "/compute", cur, d, trace.Args{}.WithToken(step)}
	nc++
	cur += d
	if r < g.cfg.Ranks-1 {
		d := g.rand(30, 120)
		var flow uint64
		if g.cfg.Flows {
			flow = trace.FlowKey(r, r+1, uint64(step))
		}
		children[nc] = child{g.name(fmt.Sprintf("send %d", r+1)), phase + "/comms", cur, d, trace.Send(r+1, 8192, flow)}
		nc++
		cur += d
	}
	end = cur + g.rand(5, 20)
	if !g.add(g.name(fmt.Sprintf("%s %d", phase, step)), phase, r, start, end-start, trace.Args{}.WithToken(step)) {
		return 0, false
	}
	for _, c := range children[:nc] {
		if !g.add(c.name, c.cat, r, c.s, c.d, c.a) {
			break
		}
	}
	return end, true
}

// samples adds the counter samples due from nextSample up to now (µs): a
// memory sample per node and a throughput sample per link every 100 ms. It
// returns the time of the next sample.
func (g *generator) samples(nextSample, now int64) int64 {
	for ; nextSample <= now; nextSample += 100_000 {
		at := time.Unix(0, g.base+nextSample*1000)
		for n := 0; n < g.cfg.Nodes; n++ {
			node := fmt.Sprintf("node-%c", 'a'+n)
			g.t.Counters = append(g.t.Counters, trace.MemorySample(node, at, float64(8<<30+g.rand(0, 1<<28))))
			if n+1 < g.cfg.Nodes {
				next := fmt.Sprintf("node-%c", 'a'+n+1)
				g.t.Counters = append(g.t.Counters, trace.LinkSample(node, next, at, float64(g.rand(50, 900))/10))
			}
		}
	}
	return nextSample
}
