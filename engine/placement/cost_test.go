package placement

import (
	"math"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/split"
)

// smallModel writes the small preset (8 blocks of dim 512, Q8_0) and
// returns its cost and layout.
func smallModel(t *testing.T) (ModelCost, Layout) {
	t.Helper()
	f, cfg := modeltest.Read(t, modeltest.Generate(t, "small.gguf", model.Presets["small"]))
	return CostOf(f, cfg), LayoutOf(f, cfg, 0, 1)
}

// speed is a node whose kernels read rate bytes/s of any type and whose
// software costs are round figures.
func speed(rate float64) runnerapi.Speed {
	ts := runnerapi.TypeSpeed{DecodeBytesPerSec: rate, PrefillFlopsPerSec: 50e9, BitsPerWeight: 8.5}
	f16 := ts
	f16.BitsPerWeight = 16
	return runnerapi.Speed{Threads: 1, MemBytesPerSec: 1e12, StreamRatio: 1, LayerMicros: 20, TokenMicros: 100,
		ReduceMicros: 30, HopMicros: 10, Types: map[string]runnerapi.TypeSpeed{"Q8_0": ts, "F32": {DecodeBytesPerSec: rate, PrefillFlopsPerSec: 50e9, BitsPerWeight: 32}, "F16": f16}}
}

func inputs(rate, oneWay float64) Inputs {
	return Inputs{Speed: map[string]runnerapi.Speed{"a": speed(rate), "b": speed(rate)}, Prompt: 64,
		Link: func(from, to string) (Link, bool) { return Link{OneWayMicros: oneWay, BytesPerSec: 1.25e9}, true }}
}

// One node's decode step is its weights over the kernel rate plus the
// measured costs per block and per pass, exactly.
func TestPredictOneNode(t *testing.T) {
	c, l := smallModel(t)
	in := inputs(3e9, 50)
	ranks, err := Split(l, []Node{{ID: "a", Available: 8 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := c.Predict(Plan{Shape: runnerapi.Shape{Pipeline: 1, Tensor: 1}, Ranks: ranks}, in)
	if err != nil {
		t.Fatal(err)
	}
	want := (decodeBytes(c)/3e9 + (8*20+100)/1e6) * 1e3
	if math.Abs(pr.DecodeMs-want) > 1e-9 || pr.CommMs != 0 {
		t.Fatalf("decode %.6f ms (comm %.6f), want %.6f", pr.DecodeMs, pr.CommMs, want)
	}
	if pr.Plan != "one node" || math.Abs(pr.DecodeTokPerSec-1e3/pr.DecodeMs) > 1e-9 || pr.PrefillTokPerSec <= 0 {
		t.Fatalf("prediction %+v", pr)
	}
}

// A pipeline of 2 pays two hops per token (the last stage's token goes
// back to the first); a tensor group of 2 pays two all-reduces per block
// and a gather of the logits, and computes half of each block and of the
// head on each rank.
func TestPredictCommunication(t *testing.T) {
	c, l := smallModel(t)
	const oneWay = 1000.0
	in := inputs(3e9, oneWay)
	nodes := []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 8 << 30}}
	ps := Candidates(l, c, nodes, true, in)
	if len(ps) != 2 || ps[0].Plan != "pipeline 2" || ps[1].Plan != "tensor 2" {
		t.Fatalf("candidates over two named nodes: %+v", ps)
	}
	row := float64(c.Dim * 4)
	hop := (2*10+oneWay)/1e3 + row/1.25e9*1e3
	if math.Abs(ps[0].CommMs-2*hop) > 1e-9 {
		t.Errorf("pipeline comm %.6f ms, want two hops %.6f", ps[0].CommMs, 2*hop)
	}
	// 16 all-reduces of a row, and the head's logits gathered (the
	// head split by vocabulary): one all-reduce of the vocabulary.
	latency := (30 + 2*10 + oneWay) / 1e3
	reduce := latency + row/1.25e9*1e3
	gather := latency + float64(c.cfg.Vocab*4)/1.25e9*1e3
	if math.Abs(ps[1].CommMs-(2*8*reduce+gather)) > 1e-9 {
		t.Errorf("tensor comm %.6f ms, want 16 all-reduces of %.6f and a gather of %.6f", ps[1].CommMs, reduce, gather)
	}
	// An all-reduce measured on these nodes replaces the formula's.
	in.Reduce = func(nodes []string) (float64, bool) { return 300, len(nodes) == 2 }
	measured := Candidates(l, c, nodes, true, in)[1]
	gather = 0.3 + float64(c.cfg.Vocab*4-int(row))/1.25e9*1e3
	if math.Abs(measured.CommMs-(2*8*0.3+gather)) > 1e-9 || len(measured.Measured) != 1 || !strings.Contains(measured.Measured[0], "300 µs") {
		t.Errorf("with a measured 300 µs all-reduce: comm %.6f ms, want 16 × 0.3 and a gather of %.6f; %v", measured.CommMs, gather, measured.Measured)
	}
	pipeCompute, tpCompute := ps[0].DecodeMs-ps[0].CommMs, ps[1].DecodeMs-ps[1].CommMs
	if r := tpCompute / pipeCompute; r < 0.5 || r > 0.7 {
		t.Errorf("tensor compute %.3f ms against the pipeline's %.3f (%.2f): want about half, plus rank 0's head", tpCompute, pipeCompute, r)
	}
}

// The choice follows the links: over 1 ms each way a pipeline, over
// 50 µs (Thunderbolt-like) the tensor group, on a model whose step takes
// ~10 ms; over free nodes, one node when it fits and links are slow.
func TestChoiceFollowsLinks(t *testing.T) {
	c, l := smallModel(t)
	nodes := []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 8 << 30}}
	rate := decodeBytes(c) / 10e-3 // ~10 ms for the whole model
	for _, tc := range []struct {
		oneWay float64
		all    bool
		want   string
	}{{1000, true, "pipeline 2"}, {50, true, "tensor 2"}, {1000, false, "one node"}, {50, false, "tensor 2"}} {
		best, ok := Fastest(Candidates(l, c, nodes, tc.all, inputs(rate, tc.oneWay)))
		if !ok || best.Plan != tc.want {
			t.Errorf("%.0f µs each way (named %v): chose %q, want %q", tc.oneWay, tc.all, best.Plan, tc.want)
		}
	}
	// A link not measured yet fails the plan, unless Unmeasured gives
	// figures to assume, which the prediction names.
	in := inputs(rate, 50)
	in.Link = func(a, b string) (Link, bool) { return Link{}, false }
	if ps := Candidates(l, c, nodes, true, in); ps[0].Fits || !strings.Contains(ps[0].Error, "no measured link") {
		t.Errorf("no links measured: %+v", ps[0])
	}
	in.Unmeasured = func() (Link, bool) { return Link{OneWayMicros: 50, BytesPerSec: 1.25e9}, true }
	if ps := Candidates(l, c, nodes, true, in); !ps[1].Fits || len(ps[1].Assumed) == 0 || !strings.Contains(ps[1].Assumed[0], "not measured yet") {
		t.Errorf("links assumed: %+v", ps[1])
	}
	// Without any speed, nothing is predicted.
	ps := Candidates(l, c, nodes, true, Inputs{Link: inputs(rate, 50).Link})
	if _, ok := Fastest(ps); ok || ps[0].Error != ErrNoSpeed.Error() {
		t.Errorf("no speeds: %+v", ps)
	}
	// A node without a speed takes another's, and says so.
	in = inputs(rate, 50)
	delete(in.Speed, "b")
	ps = Candidates(l, c, nodes, true, in)
	if !ps[1].Fits || len(ps[1].Assumed) == 0 || !strings.Contains(ps[1].Assumed[0], "node b") {
		t.Errorf("a node without speed: %+v", ps[1])
	}
}

// A tensor group that does not fit names the rank, the node and the bytes.
func TestTensorFit(t *testing.T) {
	c, l := smallModel(t)
	sl, err := split.PlanTP(c.f, c.cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	ranks, err := Tensor(l, sl, []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 8 << 30}})
	if err != nil || ranks[0].Need != ranks[1].Need || ranks[1].LastLayer != l.Layers || !strings.Contains(ranks[1].Slice, "head rows 2048–4095") {
		t.Fatalf("ranks %+v, err %v: each rank holds half the head", ranks, err)
	}
	_, err = Tensor(l, sl, []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 100 << 20}})
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "node b") {
		t.Fatalf("err %v", err)
	}
}

// Pipeline 2 × tensor 2: each stage's group holds its own blocks, the
// embeddings on stage 0's ranks, the head split on stage 1's; each rank
// needs about half its stage's pipeline rank; the blocks follow the
// groups' memory; a rank that does not fit is named with its stage.
func TestHybridFit(t *testing.T) {
	c, l := smallModel(t)
	sl, err := split.PlanTP(c.f, c.cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	big := uint64(8 << 30)
	ranks, err := Hybrid(l, sl, []Node{{ID: "a", Available: big}, {ID: "b", Available: big}, {ID: "c", Available: big}, {ID: "d", Available: big}}, 2)
	if err != nil || len(ranks) != 4 {
		t.Fatalf("ranks %+v, err %v", ranks, err)
	}
	half := l.Layers / 2
	for i, r := range ranks {
		first, last := 0, half
		if i >= 2 {
			first, last = half, l.Layers
		}
		if r.Rank != i || r.FirstLayer != first || r.LastLayer != last || r.Slice == "" {
			t.Errorf("rank %d: %+v, want layers [%d, %d) and a slice", i, r, first, last)
		}
		pipe := l.Need(first, last) - Overhead
		if own := r.Need - Overhead; own > pipe*3/5 {
			t.Errorf("rank %d needs %d of its stage's %d", i, own, pipe)
		}
	}
	if ranks[2].Need != ranks[3].Need || ranks[0].Need != ranks[1].Need || ranks[2].Need == ranks[0].Need {
		t.Errorf("stage 1's ranks share the head, stage 0's the embeddings: %+v", ranks)
	}
	// Stage 0's group has twice stage 1's memory: about twice its blocks.
	ranks, err = Hybrid(l, sl, []Node{{ID: "a", Available: 2 * big}, {ID: "b", Available: 2 * big}, {ID: "c", Available: big}, {ID: "d", Available: big}}, 2)
	if err != nil || ranks[0].LastLayer-ranks[0].FirstLayer <= ranks[2].LastLayer-ranks[2].FirstLayer {
		t.Errorf("ranks %+v, err %v: want more blocks on the larger group", ranks, err)
	}
	_, err = Hybrid(l, sl, []Node{{ID: "a", Available: big}, {ID: "b", Available: big}, {ID: "c", Available: big}, {ID: "d", Available: 1 << 20}}, 2)
	if err == nil || !strings.Contains(err.Error(), "rank 3 of stage 1") || !strings.Contains(err.Error(), "node d") {
		t.Errorf("err %v: want rank 3 of stage 1 on node d named", err)
	}
	if _, err := Hybrid(l, sl, []Node{{ID: "a", Available: big}, {ID: "b", Available: big}, {ID: "c", Available: big}}, 2); err == nil {
		t.Error("3 nodes for 2 stages of 2 accepted")
	}
}

// Two fast pairs (a–c, b–d: 5 µs each way, RDMA-like) joined by slow
// links (2 ms): the hybrid candidate groups each pair into a tensor group
// and chains the two as a pipeline, and it beats tensor 4 (its
// all-reduces cross the slow links) and pipeline 4 (four slow hops).
func TestHybridFollowsLinks(t *testing.T) {
	c, l := smallModel(t)
	nodes := []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 8 << 30}, {ID: "c", Available: 8 << 30}, {ID: "d", Available: 8 << 30}}
	in := inputs(decodeBytes(c)/10e-3, 0)
	for _, n := range nodes {
		in.Speed[n.ID] = speed(decodeBytes(c) / 10e-3)
	}
	in.Link = func(a, b string) (Link, bool) {
		fast := a+b == "ac" || a+b == "ca" || a+b == "bd" || a+b == "db"
		if fast {
			return Link{OneWayMicros: 5, BytesPerSec: 10e9}, true
		}
		return Link{OneWayMicros: 2000, BytesPerSec: 1.25e9}, true
	}
	ps := Candidates(l, c, nodes, true, in)
	var hybrid runnerapi.Prediction
	for _, p := range ps {
		if p.Plan == "pipeline 2 × tensor 2" {
			hybrid = p
		}
	}
	if !hybrid.Fits || strings.Join(hybrid.Nodes, "") != "acbd" {
		t.Fatalf("hybrid candidate %+v: want it to fit, grouped a,c then b,d", hybrid)
	}
	if best, ok := Fastest(ps); !ok || best.Plan != hybrid.Plan {
		t.Errorf("chose %+v, want the hybrid; candidates %+v", best, ps)
	}
	if got := groupings(6, 3, 100); len(got) != 10 || !slices.Equal(got[0], []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("6 nodes in threes: %d groupings, first %v; want 10, the identity first", len(got), got[0])
	}
	if got := groupings(8, 2, 100); len(got) != 100 {
		t.Errorf("8 nodes in pairs, at most 100: %d", len(got))
	}
}

// Types a node did not measure take the nearest in bits per weight.
func TestSpeedTypeNearest(t *testing.T) {
	sp := runnerapi.Speed{Types: map[string]runnerapi.TypeSpeed{
		"Q8_0": {DecodeBytesPerSec: 1, BitsPerWeight: 8.5}, "Q4_K": {DecodeBytesPerSec: 2, BitsPerWeight: 4.5}}}
	if ts, ok := sp.Type("Q3_K", 3.4375); !ok || ts.DecodeBytesPerSec != 2 {
		t.Errorf("Q3_K: %+v", ts)
	}
	if ts, ok := sp.Type("Q8_0", 0); !ok || ts.DecodeBytesPerSec != 1 {
		t.Errorf("Q8_0: %+v", ts)
	}
	if _, ok := (&runnerapi.Speed{}).Type("Q8_0", 8.5); ok {
		t.Error("no types measured, yet found one")
	}
}

// expertShare agrees with counting every draw of used experts from ranks
// of the given sizes, and knows the bounds: one expert per token keeps a
// rank busy for all of it, and one rank holding all is all.
func TestExpertShare(t *testing.T) {
	for _, c := range []struct {
		used  int
		sizes []int
	}{{3, []int{3, 3, 2}}, {2, []int{4, 4}}, {4, []int{5, 4}}, {1, []int{2, 2}}, {3, []int{6}}} {
		total := 0
		for _, n := range c.sizes {
			total += n
		}
		owner := []int{}
		for r, n := range c.sizes {
			for range n {
				owner = append(owner, r)
			}
		}
		var sum, draws float64
		for mask := 0; mask < 1<<total; mask++ {
			if bits.OnesCount(uint(mask)) != c.used {
				continue
			}
			count := make([]int, len(c.sizes))
			for e := range total {
				if mask&(1<<e) != 0 {
					count[owner[e]]++
				}
			}
			sum += float64(slices.Max(count))
			draws++
		}
		want := sum / draws / float64(c.used)
		if got := expertShare(c.used, c.sizes); math.Abs(got-want) > 1e-12 {
			t.Errorf("used %d of %v: %.6f, counted %.6f", c.used, c.sizes, got, want)
		}
	}
	if got := expertShare(1, []int{64, 64}); got != 1 {
		t.Errorf("one expert per token: %v", got)
	}
	// Qwen3-30B-A3B's routing on 2 ranks: the busier rank has ~0.63 of a
	// token's 8 experts, not half.
	if got := expertShare(8, []int{64, 64}); got < 0.6 || got > 0.66 {
		t.Errorf("8 of 128 on 2 ranks: %v", got)
	}
}

// A mixture split by experts: each rank needs its half of the experts
// and of the attention; a decode step computes the attention's half and,
// split by columns, half of each chosen expert, or, split whole, the
// busier rank's share of the token's experts (more than half).
func TestExpertParallelCost(t *testing.T) {
	f, cfg := modeltest.Read(t, modeltest.Generate(t, "moe.gguf", modeltest.Family(t, model.Presets["small"], "qwen3moe")))
	c, l := CostOf(f, cfg), LayoutOf(f, cfg, 0, 1)
	sl, err := split.PlanTP(f, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	ranks, err := Tensor(l, sl, []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 8 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	var blocks, experts, repl, kv uint64
	for i := range l.Block {
		blocks, experts, repl, kv = blocks+l.Block[i], experts+l.Experts[i], repl+l.Replicated[i], kv+l.KV[i]
	}
	if repl == 0 || repl > blocks/50 {
		t.Fatalf("replicated %d of %d block bytes: the norms and routers should be a small part", repl, blocks)
	}
	if experts < blocks/2 {
		t.Fatalf("experts %d of %d block bytes: the preset should be mostly experts", experts, blocks)
	}
	if want := uint64(Overhead) + repl + (blocks-repl)/2 + kv/2 + l.Embed + l.HeadNorm + (l.Head-l.HeadNorm)/2; absDiff(ranks[1].Need, want) > 64 {
		t.Errorf("rank 1 needs %d, want %d: the norms and routers whole, half the experts, half the rest and half the head's rows", ranks[1].Need, want)
	}
	rate := 3e9
	in := inputs(rate, 50)
	decode := func(share float64) float64 {
		var b float64
		for il := range c.Layers {
			b += (c.Attn[il].Bytes()+c.KV[il].Bytes())/2 + c.Rest[il].Bytes() + c.Exps[il].Bytes()*share
		}
		return (b+c.Head.Bytes()/2)/rate + (float64(c.Layers)*20+100)/1e6 // each rank half the head
	}
	// Its 256 expert columns split evenly: each rank computes half of
	// every chosen expert.
	pr, err := c.Predict(Plan{Shape: runnerapi.Shape{Pipeline: 1, Tensor: 2}, Ranks: ranks}, in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pr.DecodeMs-pr.CommMs, decode(0.5)*1e3; !sl[0].ExpertColumns || math.Abs(got-want) > 1e-9 {
		t.Errorf("by columns (%v): decode compute %.6f ms, want %.6f", sl[0].ExpertColumns, got, want)
	}
	// Whole experts: the busier rank's share of a token's experts.
	whole, err := split.PlanTPExperts(f, cfg, 2, split.ExpertsWhole)
	if err != nil {
		t.Fatal(err)
	}
	speeds := map[string]runnerapi.Speed{"a": speed(rate), "b": speed(rate)}
	dec, _, err := c.groupTime(ranks, whole, speeds, in)
	if err != nil {
		t.Fatal(err)
	}
	share := expertShare(cfg.ExpertsUsed, []int{whole[0].Experts, whole[1].Experts})
	if want := decode(share); math.Abs(dec-want) > 1e-12 || share <= 0.5 {
		t.Errorf("whole experts: decode compute %.6f ms, want %.6f (the busier rank's %.3f of the experts)", dec*1e3, want*1e3, share)
	}
	wranks, err := Tensor(l, whole, []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 8 << 30}})
	if err != nil || absDiff(wranks[1].Need, ranks[1].Need) > 64 {
		t.Errorf("whole experts need %+v (%v), by columns %d: both half", wranks, err, ranks[1].Need)
	}
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
