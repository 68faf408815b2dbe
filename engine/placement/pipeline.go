package placement

import (
	"fmt"
	"math"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// speedSplitGain is how much faster (a fraction of the decode step) the
// split that follows speed must be predicted than the split by memory for
// the cost model to take it: among nodes alike they tie, and the split by
// memory, which leaves each node the most room, stays.
const speedSplitGain = 0.01

// Pipeline is the split of a pipeline over nodes (in order) that "auto"
// places: by memory (Split), or, where the cost model predicts it decodes
// faster, the split that follows speed (SpeedSplit): a pipeline computes
// one token's stages one after another, so a block decodes fastest on
// the fastest compute that holds it (a GPU's, then a fast CPU's).
func (c ModelCost) Pipeline(l Layout, nodes []Node, in Inputs) ([]Rank, error) {
	mem, err := Split(l, nodes)
	if len(nodes) < 2 {
		return mem, err
	}
	fast, ferr := c.SpeedSplit(l, nodes, in)
	switch {
	case ferr != nil:
		return mem, err
	case err != nil:
		return fast, nil // the split by memory does not fit; this one does
	}
	shape := runnerapi.Shape{Pipeline: len(nodes), Tensor: 1}
	pm, merr := c.Predict(Plan{Shape: shape, Ranks: mem}, in)
	pf, ferr := c.Predict(Plan{Shape: shape, Ranks: fast}, in)
	if ferr == nil && (merr != nil || pf.DecodeMs < pm.DecodeMs*(1-speedSplitGain)) {
		return fast, nil
	}
	return mem, nil
}

// SpeedSplit splits the blocks over nodes (in order, at least one each)
// so that the ranks' decode steps add up to the least, as the cost model
// predicts each (its blocks on its GPU at the GPU's rates, the rest at the
// CPU's: see rankTime), among the splits whose every rank fits. Nodes
// without a measured speed take another's, as in Predict.
func (c ModelCost) SpeedSplit(l Layout, nodes []Node, in Inputs) ([]Rank, error) {
	k, n := len(nodes), l.Layers
	switch {
	case k == 0:
		return nil, fmt.Errorf("no nodes to place on")
	case k > n:
		return nil, fmt.Errorf("%d nodes for a %d-layer model: at most one node per layer", k, n)
	}
	ranks := make([]Rank, k)
	for i, nd := range nodes {
		ranks[i] = Rank{Rank: i, NodeID: nd.ID}
	}
	speed, err := c.speeds(Plan{Shape: runnerapi.Shape{Pipeline: k, Tensor: 1}, Ranks: ranks}, in, &runnerapi.Prediction{})
	if err != nil {
		return nil, err
	}
	costs := make([]func(first, last int) float64, k)
	for i, nd := range nodes {
		if costs[i], err = c.rankCost(l, nd, speed[nd.ID], in); err != nil {
			return nil, err
		}
	}
	// best[i][j]: the least sum over nodes[:i] holding blocks [0, j);
	// from[i][j] where node i-1's blocks start on that path.
	inf := math.Inf(1)
	best := make([][]float64, k+1)
	from := make([][]int, k+1)
	for i := range best {
		best[i], from[i] = make([]float64, n+1), make([]int, n+1)
		for j := range best[i] {
			best[i][j] = inf
		}
	}
	best[0][0] = 0
	for i := 1; i <= k; i++ {
		for j := i; j <= n-(k-i); j++ {
			for s := i - 1; s < j; s++ {
				if best[i-1][s] == inf {
					continue
				}
				if t := best[i-1][s] + costs[i-1](s, j); t < best[i][j] {
					best[i][j], from[i][j] = t, s
				}
			}
		}
	}
	if best[k][n] == inf {
		return nil, fmt.Errorf("%w: no split of %d blocks over %d nodes fits each rank", ErrNoFit, n, k)
	}
	counts := make([]int, k)
	for i, j := k, n; i > 0; i-- {
		s := from[i][j]
		counts[i-1], j = j-s, s
	}
	return Explicit(l, nodes, counts)
}

// rankCost is what a pipeline rank on node nd costs a decode step, by the
// blocks [first, last) it holds (+Inf where they do not fit): rankTime's
// terms, summed from each block's time on the CPU and on the GPU.
func (c ModelCost) rankCost(l Layout, nd Node, sp runnerapi.Speed, in Inputs) (func(first, last int) float64, error) {
	probe := Rank{NodeID: nd.ID, GPU: nd.GPU}
	gs, cross := gpuFigures(probe, sp, nil)
	hd, kvw := float64(c.HeadDim), float64(c.KVWidth)
	// cpu[b] and gpu[b]: the blocks before b, each alone (its products,
	// its attention and its own cost), on either side.
	cpu, gpu := make([]float64, c.Layers+1), make([]float64, c.Layers+1)
	for b := range c.Layers {
		w := c.Attn[b].plus(c.KV[b]).plus(c.Rest[b]).plus(c.MLP[b]).plus(c.Shared[b]).plus(c.Exps[b])
		d, _, err := passTimeFixed(sp, w, 1, float64(c.Heads), hd, kvw, in, sp.LayerMicros/1e6)
		if err != nil {
			return nil, err
		}
		cpu[b+1] = cpu[b] + d
		if nd.GPU != nil {
			if d, _, err = passTimeFixed(gs, w, 1, float64(c.Heads), hd, kvw, in, gs.LayerMicros/1e6); err != nil {
				return nil, err
			}
		}
		gpu[b+1] = gpu[b] + d
	}
	headCPU, _, err := headTime(sp, c.Head, in)
	if err != nil {
		return nil, err
	}
	headGPU, _, err := headTime(gs, c.Head, in)
	if err != nil {
		return nil, err
	}
	return func(first, last int) float64 {
		m := nd.fit(l.need(first, last), l.GPUGraph, l.GPULogits)
		if m.ram > nd.Available {
			return math.Inf(1)
		}
		on := last - m.gpuBlocks
		t := cpu[on] - cpu[first] + gpu[last] - gpu[on] + sp.TokenMicros/1e6
		if m.gpuBlocks > 0 {
			t += (gs.TokenMicros - sp.TokenMicros) / 1e6
			if on > first {
				t += cross / 1e6
			}
		}
		if last == c.Layers {
			if m.gpuHead {
				t += headGPU
			} else {
				t += headCPU
			}
		}
		return t
	}, nil
}
