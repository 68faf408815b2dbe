package placement

import (
	"fmt"

	"github.com/orrery-cluster/orrery/engine/model"
)

// Tensor places one tensor-parallel group: rank i, on nodes[i], holds
// slice plan[i] of every block. Each rank needs its share of the blocks'
// weights (the larger of its heads' and its MLP columns' share; in a
// mixture, its experts' share of the experts and its heads' of the rest)
// and of the KV cache (its kv heads'), the embeddings, and on rank 0 the
// output head;
// ErrNoFit names the first that does not fit.
func Tensor(l Layout, plan []model.TPSlice, nodes []Node) ([]Rank, error) {
	if len(plan) != len(nodes) {
		return nil, fmt.Errorf("%d slices for %d nodes", len(plan), len(nodes))
	}
	var blocks, experts, kv uint64
	for i := range l.Block {
		blocks += l.Block[i]
		kv += l.KV[i]
		if i < len(l.Experts) {
			experts += l.Experts[i]
		}
	}
	ranks := make([]Rank, len(plan))
	for i, s := range plan {
		share := max(float64(s.Heads)/float64(s.FullHeads), float64(s.FFDim)/float64(s.FullFF))
		mine := float64(blocks) * share
		if s.FullExperts > 0 { // the experts' share, the rest's by heads
			own := float64(s.Experts) / float64(s.FullExperts)
			if s.ExpertColumns {
				own = float64(s.FFDim) / float64(s.FullFF)
			}
			mine = float64(blocks-experts)*float64(s.Heads)/float64(s.FullHeads) + float64(experts)*own
		}
		need := uint64(Overhead) + uint64(mine) + kv*uint64(s.KVHeads)/uint64(s.FullKVHeads) + l.Embed
		if i == 0 {
			need += l.Head
		}
		n := nodes[i]
		ranks[i] = Rank{Rank: i, NodeID: n.ID, FirstLayer: 0, LastLayer: l.Layers, Need: need, Available: n.Available, Slice: s.String()}
		if n.Available < need {
			return ranks, fmt.Errorf("%w: rank %d of the tensor-parallel group needs %.2f GiB on node %s, which has %.2f GiB available",
				ErrNoFit, i, gib(need), n.ID, gib(n.Available))
		}
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
