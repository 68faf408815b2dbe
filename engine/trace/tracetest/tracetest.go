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
	base := cfg.Start.UnixNano()
	t := &trace.Trace{
		TaskID:    "synthetic",
		CreatedAt: cfg.Start,
		Processes: map[string]string{},
		Spans:     make([]trace.Span, 0, cfg.Spans),
	}
	nodeOf := make([]string, cfg.Ranks)
	for r := range nodeOf {
		nodeOf[r] = fmt.Sprintf("node-%c", 'a'+r*cfg.Nodes/cfg.Ranks)
		t.Processes[nodeOf[r]] = fmt.Sprintf("Mac %c", 'A'+r*cfg.Nodes/cfg.Ranks)
	}
	rng := uint64(0x9e3779b97f4a7c15)
	rand := func(lo, hi int64) int64 { // xorshift64*, deterministic
		rng ^= rng >> 12
		rng ^= rng << 25
		rng ^= rng >> 27
		return lo + int64((rng*0x2545f4914f6cdd1d)>>33)%(hi-lo)
	}
	add := func(name, cat string, rank int, startUs, durUs int64, a trace.Args) bool {
		if len(t.Spans) == cfg.Spans {
			return false
		}
		t.Spans = append(t.Spans, trace.Span{
			Name: name, Cat: cat, Node: nodeOf[rank], Rank: rank,
			StartNs: base + startUs*1000, DurNs: durUs * 1000, Args: a,
		})
		return true
	}
	names := map[string]string{} // share name strings like a recorder does
	name := func(s string) string {
		if n, ok := names[s]; ok {
			return n
		}
		names[s] = s
		return s
	}

	var now int64 // µs
	nextSample := int64(0)
	for step := 0; len(t.Spans) < cfg.Spans; step++ {
		phase := "decode"
		if step == 0 {
			phase = "prefill"
		}
		for r := 0; r < cfg.Ranks; r++ {
			start := now
			cur := now
			var children [3]struct {
				name, cat string
				s, d      int64
				a         trace.Args
			}
			nc := 0
			if r > 0 {
				d := rand(40, 160)
				var flow uint64
				if cfg.Flows {
					flow = trace.FlowKey(r-1, r, uint64(step))
				}
				children[nc].name, children[nc].cat = name(fmt.Sprintf("recv %d", r-1)), phase+"/comms"
				children[nc].s, children[nc].d, children[nc].a = cur, d, trace.Recv(r-1, 8192, flow)
				nc++
				cur += d
			}
			d := rand(700, 1300)
			if phase == "prefill" {
				d *= 20
			}
			children[nc].name, children[nc].cat = "joint_blocks", phase+"/compute"
			children[nc].s, children[nc].d, children[nc].a = cur, d, trace.Args{}.WithToken(step)
			nc++
			cur += d
			if r < cfg.Ranks-1 {
				d := rand(30, 120)
				var flow uint64
				if cfg.Flows {
					flow = trace.FlowKey(r, r+1, uint64(step))
				}
				children[nc].name, children[nc].cat = name(fmt.Sprintf("send %d", r+1)), phase+"/comms"
				children[nc].s, children[nc].d, children[nc].a = cur, d, trace.Send(r+1, 8192, flow)
				nc++
				cur += d
			}
			end := cur + rand(5, 20)
			if !add(name(fmt.Sprintf("%s %d", phase, step)), phase, r, start, end-start, trace.Args{}.WithToken(step)) {
				break
			}
			for _, c := range children[:nc] {
				if !add(c.name, c.cat, r, c.s, c.d, c.a) {
					break
				}
			}
			now = end
		}
		if cfg.Counters {
			for ; nextSample <= now; nextSample += 100_000 {
				at := time.Unix(0, base+nextSample*1000)
				for n := 0; n < cfg.Nodes; n++ {
					node := fmt.Sprintf("node-%c", 'a'+n)
					t.Counters = append(t.Counters, trace.MemorySample(node, at, float64(8<<30+rand(0, 1<<28))))
					if n+1 < cfg.Nodes {
						next := fmt.Sprintf("node-%c", 'a'+n+1)
						t.Counters = append(t.Counters, trace.LinkSample(node, next, at, float64(rand(50, 900))/10))
					}
				}
			}
		}
	}
	return t
}
