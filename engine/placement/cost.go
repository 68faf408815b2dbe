package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/split"
)

// The cost model: what "parallelism": "auto" predicts each candidate plan
// from. docs/cost-model.md gives the formulas; in short, a decode step is
// every rank's weight bytes over its node's measured kernel rate, plus a
// measured cost per block and per pass, plus the messages: one hop per
// rank for a pipeline, two all-reduces per block for a tensor-parallel
// group.

// Weights are matrices by type: bytes read, and values (2 flops each per
// token).
type Weights map[string]TypeBytes

// TypeBytes is one type's share of a set of weights.
type TypeBytes struct {
	Bytes  float64 `json:"bytes"`
	Values float64 `json:"values"`
	Bits   float64 `json:"bits"` // per value, for types the node did not measure
}

func (w Weights) add(t gguf.TensorInfo, share float64) {
	e := w[t.Type.String()]
	e.Bytes += float64(t.Size) * share
	e.Values += float64(t.Elements()) * share
	if n := t.Elements(); n > 0 {
		e.Bits = float64(t.Size) * 8 / float64(n)
	}
	w[t.Type.String()] = e
}

func (w Weights) scaled(f float64) Weights {
	out := Weights{}
	for k, v := range w {
		v.Bytes *= f
		v.Values *= f
		out[k] = v
	}
	return out
}

func (w Weights) plus(o Weights) Weights {
	out := Weights{}
	for _, m := range []Weights{w, o} {
		for k, v := range m {
			e := out[k]
			e.Bytes += v.Bytes
			e.Values += v.Values
			e.Bits = v.Bits
			out[k] = e
		}
	}
	return out
}

// Bytes is the total.
func (w Weights) Bytes() float64 {
	var b float64
	for _, v := range w {
		b += v.Bytes
	}
	return b
}

// ModelCost is what one token costs a model: the weights it reads per
// block (attention by its heads, the MLP by its columns, the rest
// replicated), the head's, and the sizes of what moves between ranks.
type ModelCost struct {
	Layers int
	// Attn holds the matrices split by query heads (q, output), KV those
	// split by kv heads (k, v), MLP those split by columns, Shared
	// deepseek2's shared experts (by columns too), Exps a mixture's
	// experts (with the fraction a token uses), Rest the replicated ones
	// (norms, routers, deepseek2's compressions), per block.
	Attn, KV, MLP, Shared, Exps, Rest []Weights
	Head                              Weights
	// Dim is the hidden size: one row of activations is Dim f32.
	Dim, Heads, HeadDim int
	// KVWidth is the cache values per position per block (k and v).
	KVWidth int
	cfg     model.Config
	f       *gguf.File
}

// CostOf reads a model's cost from its header.
func CostOf(f *gguf.File, cfg model.Config) ModelCost {
	c := ModelCost{Layers: cfg.Layers, Dim: cfg.Dim, Heads: cfg.Heads, HeadDim: cfg.HeadDim, KVWidth: cfg.KVWidth(), Head: Weights{}, cfg: cfg, f: f}
	for range cfg.Layers {
		for _, w := range []*[]Weights{&c.Attn, &c.KV, &c.MLP, &c.Shared, &c.Exps, &c.Rest} {
			*w = append(*w, Weights{})
		}
	}
	used := 1.0
	if cfg.Experts > 0 && cfg.ExpertsUsed > 0 {
		used = float64(cfg.ExpertsUsed) / float64(cfg.Experts)
	}
	for _, t := range f.Tensors {
		switch {
		case t.Name == "output_norm.weight" || strings.HasPrefix(t.Name, "output."):
			c.Head.add(t, 1)
		default:
			n, p, ok := blockPart(t, cfg.Layers)
			if !ok {
				continue
			}
			switch p {
			case partExperts:
				c.Exps[n].add(t, used)
			case partShared:
				c.Shared[n].add(t, 1)
			case partKV:
				c.KV[n].add(t, 1)
			case partAttn:
				c.Attn[n].add(t, 1)
			case partMLP:
				c.MLP[n].add(t, 1)
			default:
				c.Rest[n].add(t, 1)
			}
		}
	}
	if cfg.TiedOutput {
		if t, ok := f.Tensor("token_embd.weight"); ok {
			c.Head.add(*t, 1)
		}
	}
	return c
}

// Link is what the cost model knows of the path from one node to
// another: the latency one way (half the measured round trip) and the
// bytes per second it carries.
type Link struct {
	OneWayMicros float64 `json:"oneWayMicros"`
	BytesPerSec  float64 `json:"bytesPerSec"`
}

// Inputs are the measurements a prediction uses.
type Inputs struct {
	// Speed of each node by id.
	Speed map[string]runnerapi.Speed
	// Link from a node to another; false when unmeasured.
	Link func(from, to string) (Link, bool)
	// Position is where decode is predicted (tokens already in the
	// cache); Prompt the prefill's length.
	Position, Prompt int
	// Unmeasured, when not nil, gives the figures to assume for a pair of
	// nodes whose link has no measurement yet (a cluster just formed).
	Unmeasured func() (Link, bool)
	// Reduce, when not nil, is the mean all-reduce of one decode row a
	// tensor-parallel group on these nodes measured (µs); it then stands
	// in for the formula's latency and software.
	Reduce func(nodes []string) (float64, bool)
	// Direct says a group's ranks link directly (agent --direct-links),
	// not through the agents: their all-reduces pay no relay hops.
	Direct bool
}

// Plan is a candidate: its shape's ranks, in rank order (stage-major).
type Plan struct {
	Shape runnerapi.Shape `json:"shape"`
	Ranks []Rank          `json:"ranks"`
}

// groupTime is one pipeline stage's compute (a group of t ranks, or one
// rank): its slowest rank's blocks (every block is split alike, so the
// slowest is the same in each), then on the last stage the head (whole on
// rank 0, or split by vocabulary), which the next token waits for.
func (c ModelCost) groupTime(group []Rank, shares []model.TPSlice, speed map[string]runnerapi.Speed, in Inputs) (dec, pre float64, err error) {
	return c.stageTime(group, shares, speed, in, nil)
}

// stageTime is groupTime, saying in pr (when not nil) what it assumed of
// a GPU, and counting the host trips a rank's GPU blocks add.
func (c ModelCost) stageTime(group []Rank, shares []model.TPSlice, speed map[string]runnerapi.Speed, in Inputs, pr *runnerapi.Prediction) (dec, pre float64, err error) {
	t := len(group)
	last := group[0].LastLayer
	share := func(num, den int) float64 { return float64(num) / float64(den) }
	// A mixture's decode step waits for the rank that holds the most of
	// the token's experts; a prefill's many tokens spread over all.
	var busiest float64
	if t > 1 && shares[0].FullExperts > 0 && !shares[0].ExpertColumns {
		sizes := make([]int, t)
		for i, s := range shares {
			sizes[i] = s.Experts
		}
		busiest = expertShare(c.cfg.ExpertsUsed, sizes)
	}
	for i, r := range group {
		a, kv, m, sh, eDec, ePre := 1.0, 1.0, 1.0, 1.0, 1.0, 1.0
		if t > 1 {
			sl := shares[i]
			a, kv, m = share(sl.Heads, sl.FullHeads), share(sl.KVHeads, sl.FullKVHeads), share(sl.FFDim, sl.FullFF)
			eDec, ePre = m, m // experts by columns, or none
			if sl.FullExperts > 0 && !sl.ExpertColumns {
				// Whole experts: the busiest rank's share in decode.
				eDec, ePre = busiest, share(sl.Experts, sl.FullExperts)
			}
			if sl.FullSharedFF > 0 {
				sh = share(sl.SharedFF, sl.FullSharedFF)
			}
		}
		blocks := func(from, to int) (wDec, wPre Weights) {
			wDec, wPre = Weights{}, Weights{}
			for il := from; il < to; il++ {
				w := c.Attn[il].scaled(a).plus(c.KV[il].scaled(kv)).plus(c.Rest[il]).plus(c.MLP[il].scaled(m)).plus(c.Shared[il].scaled(sh))
				wDec, wPre = wDec.plus(w).plus(c.Exps[il].scaled(eDec)), wPre.plus(w).plus(c.Exps[il].scaled(ePre))
			}
			return wDec, wPre
		}
		heads, kvw := float64(c.Heads), float64(c.KVWidth)
		if t > 1 {
			heads *= share(shares[i].Heads, shares[i].FullHeads)
			kvw *= share(shares[i].KVHeads, shares[i].FullKVHeads)
		}
		d, pf, err := c.rankTime(r, blocks, heads, kvw, speed[r.NodeID], in, pr)
		if err != nil {
			return 0, 0, err
		}
		dec, pre = max(dec, d), max(pre, pf)
	}
	if last == c.Layers {
		// The head: on rank 0, or each rank its rows (the gather is in
		// groupComm); the slowest rank's.
		var hd, hp float64
		for i, r := range group {
			w := c.Head
			switch {
			case t > 1 && shares[i].VocabRows > 0:
				w = w.scaled(share(shares[i].VocabRows, c.cfg.Vocab))
			case i > 0:
				continue
			}
			hs := speed[r.NodeID]
			if r.GPUHead {
				hs, _ = gpuFigures(r, hs, pr)
			}
			d, pf, err := headTime(hs, w, in)
			if err != nil {
				return 0, 0, err
			}
			hd, hp = max(hd, d), max(hp, pf)
		}
		dec, pre = dec+hd, pre+hp
	}
	return dec, pre, nil
}

// ErrNoSpeed is returned when no node has a measured speed.
var ErrNoSpeed = errors.New("no node has measured its speed yet")

// Predict predicts plan p. A node without a speed takes another's, a
// link measured one way only its reverse's figures, one never measured
// in.Unmeasured's (each said in Assumed); with none of those, the
// prediction fails.
func (c ModelCost) Predict(p Plan, in Inputs) (runnerapi.Prediction, error) {
	pr := runnerapi.Prediction{Plan: p.Shape.String(), Shape: p.Shape, PrefillTokens: in.Prompt}
	for _, r := range p.Ranks {
		pr.Nodes = append(pr.Nodes, r.NodeID)
	}
	speed, err := c.speeds(p, in, &pr)
	if err != nil {
		return pr, err
	}
	var shares []model.TPSlice
	if p.Shape.TensorParallel() {
		if shares, err = split.PlanTP(c.f, c.cfg, p.Shape.Tensor); err != nil {
			return pr, err
		}
	}
	link := func(a, b string) (Link, error) {
		if a == b {
			return Link{BytesPerSec: 10e9}, nil
		}
		if l, ok := in.Link(a, b); ok {
			return l, nil
		}
		if l, ok := in.Link(b, a); ok {
			pr.Assumed = append(pr.Assumed, fmt.Sprintf("link %s→%s: the reverse direction's figures", a, b))
			return l, nil
		}
		if in.Unmeasured != nil {
			if l, ok := in.Unmeasured(); ok {
				pr.Assumed = append(pr.Assumed, fmt.Sprintf("link %s→%s: not measured yet; the slowest measured link's figures", a, b))
				return l, nil
			}
		}
		return Link{}, fmt.Errorf("no measured link between %s and %s", a, b)
	}
	row := float64(c.Dim * 4)
	var decode, prefill, comm, commPre float64 // seconds
	for s := range p.Shape.Pipeline {
		group := p.Ranks[p.Shape.Rank(s, 0):p.Shape.Rank(s+1, 0)]
		dec, pre, err := c.stageTime(group, shares, speed, in, &pr)
		if err != nil {
			return pr, err
		}
		decode += dec
		prefill += pre
		if p.Shape.TensorParallel() {
			gather := 0
			if shares[0].VocabRows > 0 {
				gather = c.cfg.Vocab
			}
			dc, pc, err := c.groupComm(group, gather, speed, in, link, &pr)
			if err != nil {
				return pr, err
			}
			comm += dc
			commPre += pc
		}
		// The hop to the next stage (the last stage's token goes back to
		// the first): through both ends' agents and the link.
		if next, ok := p.Shape.Next(p.Shape.Rank(s, 0)); ok {
			from, to := group[0].NodeID, p.Ranks[next].NodeID
			l, err := link(from, to)
			if err != nil {
				return pr, err
			}
			hop := func(bytes float64) float64 {
				return (2*speed[from].HopMicros+l.OneWayMicros)/1e6 + bytes/l.BytesPerSec
			}
			comm += hop(row)
			commPre += hop(row * float64(in.Prompt))
		}
	}
	decode += comm
	prefill += commPre
	pr.DecodeMs, pr.CommMs, pr.PrefillMs = decode*1e3, comm*1e3, prefill*1e3
	pr.DecodeTokPerSec = 1 / decode
	if prefill > 0 {
		pr.PrefillTokPerSec = float64(in.Prompt) / prefill
	}
	return pr, nil
}

// groupComm is a tensor-parallel group's messages in one decode step and
// one prefill: two all-reduces per block, each a direct exchange of one
// row per token with the other ranks (a large one among 3 or more:
// reduce-scatter then all-gather), over the group's slowest link; and
// with the head split by vocabulary (gather > 0), the logits of the last
// position gathered (an all-reduce of gather f32). A figure measured on
// the same nodes (in.Reduce) replaces the formula's latency and software.
func (c ModelCost) groupComm(group []Rank, gather int, speed map[string]runnerapi.Speed, in Inputs, link func(a, b string) (Link, error), pr *runnerapi.Prediction) (decode, prefill float64, err error) {
	t := len(group)
	row := float64(c.Dim * 4)
	var worst Link
	for _, a := range group {
		for _, b := range group {
			if a.NodeID == b.NodeID {
				continue
			}
			l, err := link(a.NodeID, b.NodeID)
			if err != nil {
				return 0, 0, err
			}
			worst.OneWayMicros = max(worst.OneWayMicros, l.OneWayMicros)
			if worst.BytesPerSec == 0 || l.BytesPerSec < worst.BytesPerSec {
				worst.BytesPerSec = l.BytesPerSec
			}
		}
	}
	sp := speed[group[0].NodeID]
	wire := float64(t-1) * row / worst.BytesPerSec // one row's bytes
	hops := 2 * sp.HopMicros                       // runner → agent, agent → runner
	if in.Direct {
		hops = 0
	}
	latency := (sp.ReduceMicros*float64(t-1) + hops + worst.OneWayMicros) / 1e6
	if in.Reduce != nil {
		ids := make([]string, t)
		for i, r := range group {
			ids[i] = r.NodeID
		}
		if us, ok := in.Reduce(ids); ok {
			pr.Measured = append(pr.Measured, fmt.Sprintf("all-reduce on these nodes: %.0f µs measured in decode, where the formula says %.0f",
				us, (latency+wire)*1e6))
			latency = max(0, us/1e6-wire)
		}
	}
	// One all-reduce of bytes: a direct exchange, or among 3 or more for
	// a large one, reduce-scatter then all-gather (two rounds, 2(t-1)/t
	// of it on the wire instead of t-1 times it).
	reduce := func(bytes float64) float64 {
		if t > 2 && int(bytes) >= collective.DefaultScatterMin {
			return 2*latency + 2*float64(t-1)/float64(t)*bytes/worst.BytesPerSec
		}
		return latency + float64(t-1)*bytes/worst.BytesPerSec
	}
	first, last := group[0].FirstLayer, group[0].LastLayer
	n := float64(2 * (last - first))
	decode, prefill = n*(latency+wire), n*reduce(row*float64(in.Prompt))
	if gather > 0 && last == c.Layers {
		g := reduce(float64(gather * 4))
		decode, prefill = decode+g, prefill+g
	}
	cross := groupCrossings(group, gather > 0 && last == c.Layers, speed, pr)
	return decode + cross, prefill + cross, nil
}

// speeds maps each node of p to a speed, standing in a measured node's
// for one without.
func (c ModelCost) speeds(p Plan, in Inputs, pr *runnerapi.Prediction) (map[string]runnerapi.Speed, error) {
	var known []string
	for id, s := range in.Speed {
		if s.Check() == nil {
			known = append(known, id)
		}
	}
	if len(known) == 0 {
		return nil, ErrNoSpeed
	}
	slices.Sort(known)
	out := map[string]runnerapi.Speed{}
	for _, r := range p.Ranks {
		if s, ok := in.Speed[r.NodeID]; ok && s.Check() == nil {
			out[r.NodeID] = s
			continue
		}
		out[r.NodeID] = in.Speed[known[0]]
		pr.Assumed = append(pr.Assumed, fmt.Sprintf("node %s: no speed measured yet; %s's", r.NodeID, known[0]))
	}
	if err := p.Shape.Validate(); err != nil || len(p.Ranks) != p.Shape.Ranks() {
		return nil, fmt.Errorf("plan %s with %d ranks (%v)", p.Shape, len(p.Ranks), err)
	}
	return out, nil
}

// headTime is the output head's share of a decode step and of a prefill
// (whose head computes the last position only).
func headTime(sp runnerapi.Speed, w Weights, in Inputs) (decode, prefill float64, err error) {
	for k, v := range w {
		ts, ok := sp.Type(k, v.Bits)
		if !ok {
			return 0, 0, fmt.Errorf("no kernel figures for %s", k)
		}
		decode += v.Bytes / sp.DecodeRate(ts)
	}
	if in.Prompt > 0 {
		prefill = decode
	}
	return decode, prefill, nil
}

// passTime is one rank's decode step (one token at Position) and prefill
// (Prompt tokens in one pass) over w and layers blocks with heads query
// heads of headDim and kvw cache values per position.
func passTime(sp runnerapi.Speed, w Weights, layers int, heads, headDim, kvw float64, in Inputs) (decode, prefill float64, err error) {
	return passTimeFixed(sp, w, layers, heads, headDim, kvw, in, (float64(layers)*sp.LayerMicros+sp.TokenMicros)/1e6)
}

// passTimeFixed is passTime with fixed (seconds) for the pass's own costs
// beyond its products and attention.
func passTimeFixed(sp runnerapi.Speed, w Weights, layers int, heads, headDim, kvw float64, in Inputs, fixed float64) (decode, prefill float64, err error) {
	types := make([]string, 0, len(w))
	for k := range w {
		types = append(types, k)
	}
	slices.Sort(types)
	for _, k := range types {
		v := w[k]
		ts, ok := sp.Type(k, v.Bits)
		if !ok {
			return 0, 0, fmt.Errorf("no kernel figures for %s", k)
		}
		decode += v.Bytes / sp.DecodeRate(ts)
		prefill += 2 * v.Values * float64(in.Prompt) / ts.PrefillFlopsPerSec
	}
	// Attention: decode reads the cache (f16); prefill's scores and sums
	// are 2·2·P²/2 flops per head dim, at the F16 kernels' rate.
	decode += fixed + float64(layers)*float64(in.Position)*kvw*2/sp.MemBytesPerSec
	if in.Prompt > 0 {
		f16, _ := sp.Type("F16", 16)
		p := float64(in.Prompt)
		prefill += fixed + float64(layers)*2*p*p*heads*headDim/cmp.Or(f16.PrefillFlopsPerSec, 1e12)
	}
	return decode, prefill, nil
}

// Fastest is the plan with the shortest predicted decode step among
// those that fit (fewer nodes on a tie); false when none does.
func Fastest(ps []runnerapi.Prediction) (runnerapi.Prediction, bool) {
	best, ok := runnerapi.Prediction{}, false
	for _, p := range ps {
		if !p.Fits || p.Error != "" {
			continue
		}
		if !ok || p.DecodeMs < best.DecodeMs || p.DecodeMs == best.DecodeMs && len(p.Nodes) < len(best.Nodes) {
			best, ok = p, true
		}
	}
	return best, ok
}
