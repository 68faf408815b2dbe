package placement

import (
	"fmt"
	"slices"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The cost model's GPU terms (docs/cost-model.md): a rank's blocks on its
// node's GPU (Rank.GPUBlocks, its last ones) compute at the GPU's measured
// rates (runnerapi.GPUSpeed), the rest at the CPU's; a pass with blocks on
// a GPU pays the GPU's own per-block and per-pass costs, and one trip
// through the host more when the pass also has blocks on the CPU; each
// tensor-parallel sum of a block on a GPU is a CPU op, so it takes the
// block's output through the host and back (one trip, the sum waiting
// for the slowest rank's).

// assumedCrossMicros stands in for a trip through the host that the
// node's GPU did not measure (a speed file from before it was measured):
// a synchronization and two copies of a decode row over PCIe.
const assumedCrossMicros = 30.0

// assume adds note to pr's Assumed, once.
func assume(pr *runnerapi.Prediction, note string) {
	if pr != nil && !slices.Contains(pr.Assumed, note) {
		pr.Assumed = append(pr.Assumed, note)
	}
}

// gpuFigures are the figures of rank r's GPU on its node (sp the node's
// speed), in a Speed's shape, and what a trip through the host costs a
// pass there (µs). A GPU not measured takes the CPU's figures, and a trip
// not measured assumedCrossMicros, each said in pr.
func gpuFigures(r Rank, sp runnerapi.Speed, pr *runnerapi.Prediction) (runnerapi.Speed, float64) {
	if r.GPU == nil {
		return sp, 0
	}
	g, ok := sp.GPU(r.GPU.ID, r.GPU.Library)
	if !ok {
		assume(pr, fmt.Sprintf("node %s: GPU %s not measured; its blocks at the CPU's speed, a trip through the host %.0f µs",
			r.NodeID, r.GPU.Name, assumedCrossMicros))
		return sp, assumedCrossMicros
	}
	if g.CrossMicros <= 0 {
		assume(pr, fmt.Sprintf("node %s: GPU %s's trip through the host not measured; %.0f µs", r.NodeID, r.GPU.Name, assumedCrossMicros))
		return g.Speed(), assumedCrossMicros
	}
	return g.Speed(), g.CrossMicros
}

// rankTime is rank r's decode step and prefill over its blocks, whose
// weights blocks(from, to) gives (as decode and prefill read them), with
// heads query heads and kvw cache values per position: the blocks on its
// GPU at the GPU's rates, the others at the CPU's (sp).
func (c ModelCost) rankTime(r Rank, blocks func(from, to int) (Weights, Weights), heads, kvw float64, sp runnerapi.Speed, in Inputs, pr *runnerapi.Prediction) (dec, pre float64, err error) {
	first, last := r.FirstLayer, r.LastLayer
	g := min(max(r.GPUBlocks, 0), last-first)
	if r.GPU == nil || g == 0 {
		wDec, wPre := blocks(first, last)
		d, _, err := passTime(sp, wDec, last-first, heads, float64(c.HeadDim), kvw, in)
		if err != nil {
			return 0, 0, err
		}
		_, pf, err := passTime(sp, wPre, last-first, heads, float64(c.HeadDim), kvw, in)
		return d, pf, err
	}
	gs, cross := gpuFigures(r, sp, pr)
	on := last - g // the first block on the GPU
	// The GPU's pass costs its blocks and its launch; the blocks before
	// it on the CPU cost theirs, and one trip to the GPU.
	fixedGPU := (float64(g)*gs.LayerMicros + gs.TokenMicros) / 1e6
	if on > first {
		fixedGPU += cross / 1e6
		if pr != nil {
			pr.HostCrossings++
		}
	}
	for _, part := range []struct {
		sp       runnerapi.Speed
		from, to int
		fixed    float64
	}{{sp, first, on, float64(on-first) * sp.LayerMicros / 1e6}, {gs, on, last, fixedGPU}} {
		if part.to == part.from {
			continue
		}
		wDec, wPre := blocks(part.from, part.to)
		d, _, err := passTimeFixed(part.sp, wDec, part.to-part.from, heads, float64(c.HeadDim), kvw, in, part.fixed)
		if err != nil {
			return 0, 0, err
		}
		_, pf, err := passTimeFixed(part.sp, wPre, part.to-part.from, heads, float64(c.HeadDim), kvw, in, part.fixed)
		if err != nil {
			return 0, 0, err
		}
		dec, pre = dec+d, pre+pf
	}
	return dec, pre, nil
}

// groupCrossings is what a tensor-parallel group's sums of blocks on a
// GPU add to a step (seconds): two sums per block, each a trip through
// the host on every rank that holds the block on its GPU, waited for by
// all (the slowest rank's trip); with the head's logits gathered (gather),
// one more where a rank's head is on its GPU. It counts them in pr.
func groupCrossings(group []Rank, gather bool, speed map[string]runnerapi.Speed, pr *runnerapi.Prediction) float64 {
	cross := make([]float64, len(group))
	any := false
	for i, r := range group {
		if r.GPU != nil && (r.GPUBlocks > 0 || r.GPUHead) {
			_, cross[i] = gpuFigures(r, speed[r.NodeID], pr)
			any = true
		}
	}
	if !any {
		return 0
	}
	var total float64
	trips := 0
	for il := group[0].FirstLayer; il < group[0].LastLayer; il++ {
		var worst float64
		on := false
		for i, r := range group {
			if r.onGPU(il) {
				worst, on = max(worst, cross[i]), true
			}
		}
		if on {
			total += 2 * worst
			trips += 2
		}
	}
	if gather {
		var worst float64
		on := false
		for i, r := range group {
			if r.GPUHead {
				worst, on = max(worst, cross[i]), true
			}
		}
		if on {
			total += worst
			trips++
		}
	}
	if pr != nil {
		pr.HostCrossings += trips
	}
	return total / 1e6
}
