package placement

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/split"
)

// header generates a model's header (no weights) of preset's shape with
// layers blocks, and reads its cost and layout (one slot).
func header(t *testing.T, preset string, layers int) (*gguf.File, model.Config, ModelCost, Layout) {
	t.Helper()
	o := model.Presets[preset]
	o.Layers = layers
	f, err := model.GenHeader(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, cfg, CostOf(f, cfg), LayoutOf(f, cfg, 0, 1)
}

// blockBytes is what block il's tensors declare, headBytes the output
// head's (with the embeddings, when tied): what a decode step reads.
func blockBytes(f *gguf.File, il int) float64 {
	var b float64
	for _, t := range f.Tensors {
		if strings.HasPrefix(t.Name, fmt.Sprintf("blk.%d.", il)) {
			b += float64(t.Size)
		}
	}
	return b
}

func headBytes(f *gguf.File, cfg model.Config) float64 {
	var b float64
	for _, t := range f.Tensors {
		if t.Name == "output.weight" || t.Name == "output_norm.weight" || cfg.TiedOutput && t.Name == "token_embd.weight" {
			b += float64(t.Size)
		}
	}
	return b
}

// gpuSpeed is a GPU whose kernels read rate bytes/s of any type.
func gpuSpeed(d runnerapi.Device, rate, layer, token, cross float64) runnerapi.GPUSpeed {
	ts := func(bits float64) runnerapi.TypeSpeed {
		return runnerapi.TypeSpeed{DecodeBytesPerSec: rate, PrefillFlopsPerSec: 1e12, BitsPerWeight: bits}
	}
	return runnerapi.GPUSpeed{Device: d, MemBytesPerSec: 1e12, StreamRatio: 1, LayerMicros: layer, TokenMicros: token, CrossMicros: cross,
		Types: map[string]runnerapi.TypeSpeed{"Q8_0": ts(8.5), "F32": ts(32), "F16": ts(16)}}
}

// A model larger than lavapipe's 2 GiB, on one node with that device:
// its last blocks go on the GPU, as many as fit the device after the
// compute buffers and the logits (the runner's estimate), the rest and the
// head in RAM, which then needs only those. The same device with unified
// memory holds nothing beside the RAM: the node must hold the whole
// model. The cost model predicts the rank from both sides' figures and
// one trip through the host between them.
func TestGPUSplitsOneNode(t *testing.T) {
	f, cfg, c, l := header(t, "1b", 48) // 48 blocks of Q8_0: 3.4 GB
	if size := f.DataSize(); size <= 2<<30 {
		t.Fatalf("the model is %d bytes: not larger than the device", size)
	}
	// The runner's estimate of its compute buffers (offload.go): a
	// batch's activations through a block, a margin, and the logits of
	// as many rows as speculation verifies.
	graph := uint64(backend.DefaultBatchSize)*4*uint64(8*cfg.Dim+3*cfg.FFDim) + 128<<20
	logits := uint64(min(backend.DefaultBatchSize, runnerapi.MaxDraft+1)) * 4 * uint64(cfg.Vocab)
	if l.GPUGraph != graph || l.GPULogits != logits {
		t.Errorf("GPU compute buffers %d and logits %d, want %d and %d", l.GPUGraph, l.GPULogits, graph, logits)
	}
	lavapipe := runnerapi.Device{ID: "6d657361", Library: "Vulkan", Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)",
		TotalBytes: 2 << 30, FreeBytes: 2 << 30, Software: true}
	// The blocks that fit, from the last.
	left, gpuBytes, k := lavapipe.FreeBytes-graph-logits, graph+logits, 0
	for il := l.Layers - 1; il >= 0 && l.Block[il]+l.KV[il] <= left; il-- {
		left -= l.Block[il] + l.KV[il]
		gpuBytes += l.Block[il] + l.KV[il]
		k++
	}
	if k == 0 || k == l.Layers {
		t.Fatalf("%d of %d blocks fit the device: the test wants a split", k, l.Layers)
	}
	whole := l.Need(0, l.Layers)
	node := Node{ID: "n", Available: 16 << 30, GPU: &lavapipe}
	ranks, err := Split(l, []Node{node})
	if err != nil {
		t.Fatal(err)
	}
	r := ranks[0]
	if r.GPUBlocks != k || r.CPUBlocks != l.Layers-k || r.GPUHead || r.GPUNeed != gpuBytes || r.Need != whole-(gpuBytes-graph-logits) ||
		r.GPU == nil || r.GPU.Name != "Vulkan0" {
		t.Errorf("rank %+v: want %d blocks on Vulkan0 (%d bytes there with the buffers), %d on the CPU and the head, %d bytes of RAM",
			r, k, gpuBytes, l.Layers-k, whole-(gpuBytes-graph-logits))
	}
	t.Logf("%.2f GB model on a 2 GiB device: %d of %d blocks there (%.2f GiB), %.2f GiB of RAM", float64(f.DataSize())/1e9, r.GPUBlocks,
		l.Layers, gib(r.GPUNeed), gib(r.Need))
	// The RAM needed, and a byte less: the shortfall names the device.
	node.Available = r.Need
	if _, err := Split(l, []Node{node}); err != nil {
		t.Errorf("RAM for the CPU's blocks: %v", err)
	}
	node.Available = r.Need - 1
	if _, err := Split(l, []Node{node}); !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), "on Vulkan0") {
		t.Errorf("a byte short: %v", err)
	}
	// Unified memory: the GPU's blocks are RAM too.
	unified := lavapipe
	unified.Unified = true
	node = Node{ID: "n", Available: r.Need, GPU: &unified}
	if _, err := Split(l, []Node{node}); !errors.Is(err, ErrNoFit) {
		t.Errorf("unified memory counted twice: %v", err)
	}
	node.Available = whole
	if u, err := Split(l, []Node{node}); err != nil || u[0].GPUBlocks != k || u[0].Need != whole {
		t.Errorf("unified memory holding the model: %+v, %v", u, err)
	}

	// The prediction: the CPU's blocks at its rate and per-block cost,
	// the GPU's at its own, the GPU's pass cost and one trip through the
	// host, the head on the CPU.
	const rc, rg, layerG, tokenG, cross = 4e9, 40e9, 300.0, 2000.0, 500.0
	sp := speed(rc)
	sp.GPUs = []runnerapi.GPUSpeed{gpuSpeed(lavapipe, rg, layerG, tokenG, cross)}
	in := Inputs{Speed: map[string]runnerapi.Speed{"n": sp}, Prompt: 64}
	pr, err := c.Predict(Plan{Shape: runnerapi.Shape{Pipeline: 1, Tensor: 1}, Ranks: ranks}, in)
	if err != nil {
		t.Fatal(err)
	}
	var want float64
	for il := range l.Layers {
		if il < l.Layers-k {
			want += blockBytes(f, il)/rc + sp.LayerMicros/1e6
		} else {
			want += blockBytes(f, il)/rg + layerG/1e6
		}
	}
	want += (tokenG+cross)/1e6 + headBytes(f, cfg)/rc
	if math.Abs(pr.DecodeMs-want*1e3) > 1e-9 || pr.HostCrossings != 1 || len(pr.Assumed) != 0 {
		t.Errorf("decode %.6f ms (%d host trips, assumed %v), want %.6f and one", pr.DecodeMs, pr.HostCrossings, pr.Assumed, want*1e3)
	}
	// Not measured, the GPU's blocks take the CPU's figures and a trip
	// is assumed, and the prediction says so.
	sp.GPUs = nil
	in.Speed["n"] = sp
	pr, err = c.Predict(Plan{Shape: runnerapi.Shape{Pipeline: 1, Tensor: 1}, Ranks: ranks}, in)
	if err != nil || len(pr.Assumed) != 1 || !strings.Contains(pr.Assumed[0], "Vulkan0 not measured") {
		t.Errorf("an unmeasured GPU: %v, assumed %v", err, pr.Assumed)
	}
}

// Three nodes as they publish themselves: a Linux node whose discrete GPU
// holds 3 of the model's 8 blocks, a Mac whose unified memory holds the
// model, and a node without a GPU. The cost model predicts each pipeline
// as the formulas say (each rank's blocks at its GPU's rate where they
// fit there, its CPU's elsewhere; the GPU's pass costs; a trip through
// the host for a rank split between the two; a hop per stage), splits it
// where the sum is least (not by memory: the Linux node's RAM would take
// most blocks onto its slow CPU), and "auto" picks the plan the formulas
// predict fastest.
func TestMixedClusterPicksByFormula(t *testing.T) {
	f, cfg, c, l := header(t, "small", 8)
	block := l.Block[0] + l.KV[0]
	cuda := runnerapi.Device{ID: "GPU-0", Library: "CUDA", Name: "CUDA0", Description: "NVIDIA RTX 4090",
		TotalBytes: 24 << 30, FreeBytes: l.GPUGraph + 3*block + block/2}
	metal := runnerapi.Device{ID: "0", Library: "Metal", Name: "Metal", Description: "Apple M4 Pro", TotalBytes: 12 << 30, FreeBytes: 12 << 30, Unified: true}
	nodes := []Node{{ID: "linux", Available: 64 << 30, GPU: &cuda}, {ID: "mac", Available: 16 << 30, GPU: &metal}, {ID: "cpu", Available: 64 << 30}}
	type fig struct{ rc, rg, layerG, tokenG, cross float64 }
	figs := map[string]fig{"linux": {5e9, 500e9, 5, 40, 25}, "mac": {20e9, 200e9, 8, 60, 10}, "cpu": {10e9, 0, 0, 0, 0}}
	speeds := map[string]runnerapi.Speed{}
	for _, n := range nodes {
		fg := figs[n.ID]
		sp := speed(fg.rc)
		if n.GPU != nil {
			sp.GPUs = []runnerapi.GPUSpeed{gpuSpeed(*n.GPU, fg.rg, fg.layerG, fg.tokenG, fg.cross)}
		}
		speeds[n.ID] = sp
	}
	const oneWay, bw = 50.0, 1.25e9
	in := Inputs{Speed: speeds, Prompt: 64, Link: func(a, b string) (Link, bool) { return Link{OneWayMicros: oneWay, BytesPerSec: bw}, true }}

	// The formulas, rank by rank: node id holding blocks [first, last),
	// gpu of them (its last) on its GPU, the head with them when on.
	bytes := make([]float64, l.Layers)
	for il := range bytes {
		bytes[il] = blockBytes(f, il)
	}
	head := headBytes(f, cfg)
	rankMs := func(id string, first, last, gpu int, headOnGPU bool) float64 {
		fg, sp := figs[id], speeds[id]
		var s float64
		for il := first; il < last; il++ {
			if il >= last-gpu {
				s += bytes[il]/fg.rg + fg.layerG/1e6
			} else {
				s += bytes[il]/fg.rc + sp.LayerMicros/1e6
			}
		}
		switch {
		case gpu == 0:
			s += sp.TokenMicros / 1e6
		case gpu < last-first:
			s += (fg.tokenG + fg.cross) / 1e6
		default:
			s += fg.tokenG / 1e6
		}
		if last == l.Layers {
			if headOnGPU {
				s += head / fg.rg
			} else {
				s += head / fg.rc
			}
		}
		return s * 1e3
	}
	hopMs := ((2*10+oneWay)/1e6 + float64(c.Dim*4)/bw) * 1e3
	// What each node's GPU holds of a rank (from the last block), the
	// head when every block and it fit.
	onGPU := func(n Node, first, last int) (int, bool) {
		if n.GPU == nil {
			return 0, false
		}
		free := n.GPU.FreeBytes - l.GPUGraph
		if last == l.Layers {
			free -= l.GPULogits
		}
		k := 0
		for il := last - 1; il >= first && l.Block[il]+l.KV[il] <= free; il-- {
			free -= l.Block[il] + l.KV[il]
			k++
		}
		return k, k == last-first && last == l.Layers && l.Head <= free
	}
	// Every split of a pipeline over the first k nodes, the least.
	type pipeSplit struct {
		counts []int
		ms     float64
	}
	pipeline := func(k int) pipeSplit {
		var out pipeSplit
		out.ms = math.Inf(1)
		var walk func(i, first int, counts []int, ms float64)
		walk = func(i, first int, counts []int, ms float64) {
			if i == k {
				if first == l.Layers && ms < out.ms {
					out = pipeSplit{append([]int(nil), counts...), ms}
				}
				return
			}
			for last := first + 1; last <= l.Layers-(k-1-i); last++ {
				g, h := onGPU(nodes[i], first, last)
				walk(i+1, last, append(counts, last-first), ms+rankMs(nodes[i].ID, first, last, g, h))
			}
		}
		walk(0, 0, nil, 0)
		if k > 1 {
			out.ms += float64(k) * hopMs
		}
		return out
	}
	want := map[string]pipeSplit{"one node": pipeline(1), "pipeline 2": pipeline(2), "pipeline 3": pipeline(3)}
	fastest := ""
	for plan, s := range want {
		if fastest == "" || s.ms < want[fastest].ms {
			fastest = plan
		}
	}
	preds := Candidates(l, c, nodes, false, in)
	got := map[string]runnerapi.Prediction{}
	for _, p := range preds {
		got[p.Plan] = p
		t.Logf("%-10s %8.4f ms (%d host trips) %s", p.Plan, p.DecodeMs, p.HostCrossings, p.Error)
	}
	for plan, s := range want {
		p := got[plan]
		if !p.Fits || math.Abs(p.DecodeMs-s.ms) > 1e-9 {
			t.Errorf("%s: predicted %.6f ms (fits %v: %s), the formulas' least over every split %.6f ms (blocks %v)", plan, p.DecodeMs, p.Fits, p.Error, s.ms, s.counts)
		}
	}
	auto, ok := Fastest(preds)
	if !ok || auto.Plan != fastest {
		t.Fatalf("auto picks %q, the formulas %q (%.4f ms)", auto.Plan, fastest, want[fastest].ms)
	}
	// The split the formulas chose is the one placed: pipeline 2's
	// Linux rank holds what its GPU holds, all there; the Mac the rest,
	// and the head, on its GPU, in RAM once.
	ranks, err := c.Pipeline(l, nodes[:2], in)
	if err != nil {
		t.Fatal(err)
	}
	s := want["pipeline 2"]
	if ranks[0].LastLayer != s.counts[0] || ranks[0].GPUBlocks != 3 || ranks[0].CPUBlocks != 0 || ranks[0].Need != Overhead+l.Embed ||
		ranks[1].GPUBlocks != s.counts[1] || !ranks[1].GPUHead || ranks[1].Need != l.Need(s.counts[0], l.Layers) {
		t.Errorf("pipeline 2 placed as %+v, want blocks %v, the first rank's all on CUDA0, the Mac's and the head on its GPU", ranks, s.counts)
	}
	if mem, _ := Split(l, nodes[:2]); mem[0].LastLayer == s.counts[0] {
		t.Errorf("the split by memory (%d blocks on the Linux node) is the formulas' too: the test does not tell them apart", mem[0].LastLayer)
	}
	if p := got["pipeline 2"]; p.HostCrossings != 0 || got["one node"].HostCrossings != 1 {
		t.Errorf("host trips: pipeline 2 %d, want none; one node %d, want one", p.HostCrossings, got["one node"].HostCrossings)
	}
	for _, plan := range []string{"tensor 2", "tensor 3"} {
		if p := got[plan]; p.Fits && p.DecodeMs <= want[fastest].ms {
			t.Errorf("%s predicted %.4f ms, faster than the formulas' fastest pipeline", plan, p.DecodeMs)
		}
	}
	// A tensor group's sums of blocks on a GPU each take a trip through
	// the host: two per block (the Mac's GPU holds its share of every
	// one), the gather of the logits where a rank's rows of the head are
	// there, and one for a rank whose blocks are split between its CPU and
	// its GPU (the Linux one's: 6 of its 8 halves fit).
	sl, err := split.PlanTP(f, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	group, err := Tensor(l, sl, nodes[:2])
	if err != nil {
		t.Fatal(err)
	}
	trips := 2 * l.Layers
	if sl[0].VocabRows > 0 && (group[0].GPUHead || group[1].GPUHead) {
		trips++
	}
	for _, r := range group { // and a rank split between its CPU and GPU, one
		if r.GPUBlocks > 0 && r.CPUBlocks > 0 {
			trips++
		}
	}
	if group[1].GPUBlocks != l.Layers || got["tensor 2"].HostCrossings != trips {
		t.Errorf("tensor 2: %d host trips, want %d (ranks %+v)", got["tensor 2"].HostCrossings, trips, group)
	}
}
