package placement

import (
	"errors"
	"fmt"
	"strings"

	"github.com/orrery-cluster/orrery/engine/model"
)

// Tensor places one tensor-parallel group: rank i, on nodes[i], holds
// slice plan[i] of every block. ErrNoFit names the first rank that does
// not fit (see groupRanks for what each needs).
func Tensor(l Layout, plan []model.TPSlice, nodes []Node) ([]Rank, error) {
	if len(plan) != len(nodes) {
		return nil, fmt.Errorf("%d slices for %d nodes", len(plan), len(nodes))
	}
	return groupRanks(l, plan, nodes, 0, l.Layers, 0, "the tensor-parallel group")
}

// Hybrid places a pipeline of stages whose members are tensor-parallel
// groups of len(plan): stage s on nodes[s*T:(s+1)*T], rank s*T+i holding
// slice plan[i] of the stage's blocks. The blocks are split among the
// stages in proportion to each group's smallest available memory, as
// Split does for nodes; ErrNoFit names every rank that does not fit.
func Hybrid(l Layout, plan []model.TPSlice, nodes []Node, stages int) ([]Rank, error) {
	t := len(plan)
	switch {
	case stages < 2 || t < 2 || len(nodes) != stages*t:
		return nil, fmt.Errorf("%d nodes for %d stages of %d", len(nodes), stages, t)
	case stages > l.Layers:
		return nil, fmt.Errorf("%d pipeline stages for a %d-layer model: at most one per layer", stages, l.Layers)
	}
	groups := make([]Node, stages)
	for s := range groups {
		g := Node{ID: nodes[s*t].ID, Available: nodes[s*t].capacity()}
		for _, n := range nodes[s*t : (s+1)*t] {
			g.Available = min(g.Available, n.capacity())
		}
		groups[s] = g
	}
	split, err := Split(l, groups) // for its block counts; the fit is checked per rank below
	if split == nil {
		return nil, err
	}
	var ranks []Rank
	var short []string
	for s, g := range split {
		rs, err := groupRanks(l, plan, nodes[s*t:(s+1)*t], g.FirstLayer, g.LastLayer, s*t, fmt.Sprintf("stage %d", s))
		if err != nil && !errors.Is(err, ErrNoFit) {
			return nil, err
		}
		if err != nil {
			short = append(short, strings.TrimPrefix(err.Error(), ErrNoFit.Error()+": "))
		}
		ranks = append(ranks, rs...)
	}
	if len(short) > 0 {
		return ranks, fmt.Errorf("%w: %s", ErrNoFit, strings.Join(short, "; "))
	}
	return ranks, nil
}

// groupRanks places one tensor-parallel group holding blocks [first,
// last), its ranks numbered from rank0. Each rank needs the replicated
// parts of the blocks whole, its heads' share of the attention (its kv
// heads' of k and v), its experts' share of a mixture's experts, its
// columns' share of the MLP, and its kv heads' share of the KV cache (all
// of it for deepseek2's one latent); with the first block, the
// embeddings (replicated); with the last, its rows of the output head
// (or, with the head whole, rank 0 all of it), and the embeddings when
// the head is tied to them.
func groupRanks(l Layout, plan []model.TPSlice, nodes []Node, first, last, rank0 int, what string) ([]Rank, error) {
	var blocks, experts, repl, attn, kvProj, kv uint64
	at := func(s []uint64, i int) uint64 {
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	for i := first; i < last; i++ {
		blocks += l.Block[i]
		kv += l.KV[i]
		experts, repl, attn, kvProj = experts+at(l.Experts, i), repl+at(l.Replicated, i), attn+at(l.Attn, i), kvProj+at(l.KVProj, i)
	}
	vocab := 0 // the head's rows, when split by vocabulary
	for _, s := range plan {
		vocab += s.VocabRows
	}
	ranks := make([]Rank, len(plan))
	var short []string
	for i, s := range plan {
		// The MLP's columns: a dense MLP's, or deepseek2's shared experts'
		// and its dense blocks' (the larger share).
		mlp := 0.0
		if s.FullExperts == 0 || !s.ExpertColumns && s.FFDim < s.FullFF {
			mlp = float64(s.FFDim) / float64(s.FullFF)
		}
		if s.FullSharedFF > 0 {
			mlp = max(mlp, float64(s.SharedFF)/float64(s.FullSharedFF))
		}
		heads, kvHeads := float64(s.Heads)/float64(s.FullHeads), float64(s.KVHeads)/float64(s.FullKVHeads)
		own := 0.0 // the experts' share
		switch {
		case s.ExpertColumns:
			own = float64(s.FFDim) / float64(s.FullFF)
		case s.FullExperts > 0:
			own = float64(s.Experts) / float64(s.FullExperts)
		}
		mine := float64(repl) + float64(attn)*heads + float64(kvProj)*kvHeads + float64(blocks-experts-repl-attn-kvProj)*mlp + float64(experts)*own
		rn := rankNeed{base: uint64(Overhead)}
		if first == 0 {
			rn.base += l.Embed
		}
		if last == l.Layers {
			switch {
			case vocab > 0: // the head split by vocabulary: its rows, and the norm
				rn.headRAM = l.HeadNorm + uint64(float64(l.Head-l.HeadNorm)*float64(s.VocabRows)/float64(vocab))
			case i == 0:
				rn.headRAM = l.Head
			}
			rn.hasHead, rn.headGPU = rn.headRAM > 0, rn.headRAM
			if l.Tied {
				if rn.hasHead { // a tied head's own copy of the embeddings on a GPU
					rn.headGPU += l.Embed
				}
				if first != 0 { // every rank of the last stage reads the embeddings
					rn.base += l.Embed
				}
			}
		}
		need := rn.base + rn.headRAM + uint64(mine) + kv*uint64(s.KVHeads)/uint64(s.FullKVHeads)
		n := nodes[i]
		ranks[i] = Rank{Rank: rank0 + i, NodeID: n.ID, FirstLayer: first, LastLayer: last, Need: need, Available: n.Available, Slice: s.String()}
		if n.GPU != nil {
			// Each block's share, for the blocks the GPU takes.
			for b := first; b < last; b++ {
				mlpB := l.Block[b] - at(l.Experts, b) - at(l.Replicated, b) - at(l.Attn, b) - at(l.KVProj, b)
				share := float64(at(l.Replicated, b)) + float64(at(l.Attn, b))*heads + float64(at(l.KVProj, b))*kvHeads +
					float64(mlpB)*mlp + float64(at(l.Experts, b))*own
				rn.blocks = append(rn.blocks, uint64(share)+l.KV[b]*uint64(s.KVHeads)/uint64(s.FullKVHeads))
			}
			ranks[i].setMem(n, n.fit(rn, l.GPUGraph, l.GPULogits))
		}
		if n.Available < ranks[i].Need {
			short = append(short, fmt.Sprintf("rank %d of %s needs %.2f GiB on node %s%s, which has %.2f GiB available",
				rank0+i, what, gib(ranks[i].Need), n.ID, ranks[i].gpuSays(), gib(n.Available)))
		}
	}
	if len(short) > 0 {
		return ranks, fmt.Errorf("%w: %s", ErrNoFit, strings.Join(short, "; "))
	}
	return ranks, nil
}

// expertShare is the share of a token's used experts that the busiest
// rank computes on average, E[max_r c_r] / used, when the used experts
// are drawn without replacement from ranks holding sizes[r] experts each
// (routing spread evenly, as it is on average). Exact:
// E[max] = Σ_k P(max ≥ k), and P(max < k) counts the draws that take
// fewer than k from every rank.
func expertShare(used int, sizes []int) float64 {
	total := 0
	for _, n := range sizes {
		total += n
	}
	if used < 1 || used > total {
		return 1
	}
	all := binomial(total, used)
	var e float64
	for k := 1; k <= used; k++ {
		ways := make([]float64, used+1) // ways[j]: draws of j from the ranks so far
		ways[0] = 1
		for _, n := range sizes {
			next := make([]float64, used+1)
			for j, w := range ways {
				for c := 0; c < k && c <= n && j+c <= used; c++ {
					next[j+c] += w * binomial(n, c)
				}
			}
			ways = next
		}
		e += 1 - ways[used]/all
	}
	return e / float64(used)
}

// binomial is n choose k, as a float.
func binomial(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}
