package runner

import (
	"math"
	"slices"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// logprobsOf computes the log-softmax of logits for token id and the top
// n tokens. NaN logits count as -Inf.
func logprobsOf(logits []float32, id int32, n int) *runnerapi.Logprobs {
	maxL := math.Inf(-1)
	for _, l := range logits {
		if !isBadLogit(l) && float64(l) > maxL {
			maxL = float64(l)
		}
	}
	sum := 0.0
	for _, l := range logits {
		if !isBadLogit(l) {
			sum += math.Exp(float64(l) - maxL)
		}
	}
	logZ := maxL + math.Log(sum)
	lp := func(i int32) float32 {
		if i < 0 || int(i) >= len(logits) || isBadLogit(logits[i]) {
			return float32(math.Inf(-1))
		}
		return float32(float64(logits[i]) - logZ)
	}
	out := &runnerapi.Logprobs{TokenLogprob: runnerapi.TokenLogprob{Token: id, Logprob: lp(id)}}
	n = min(n, runnerapi.MaxTopLogprobs, len(logits))
	if n <= 0 {
		return out
	}
	// Keep the n best in a small sorted slice (n ≤ 20).
	top := make([]int32, 0, n+1)
	better := func(a, b int32) bool {
		la, lb := logits[a], logits[b]
		if isBadLogit(la) != isBadLogit(lb) {
			return !isBadLogit(la)
		}
		return la > lb || la == lb && a < b
	}
	for i := range logits {
		id := int32(i)
		if len(top) == n && !better(id, top[n-1]) {
			continue
		}
		k, _ := slices.BinarySearchFunc(top, id, func(x, y int32) int {
			if better(x, y) {
				return -1
			}
			return 1
		})
		top = slices.Insert(top, k, id)
		if len(top) > n {
			top = top[:n]
		}
	}
	for _, t := range top {
		out.Top = append(out.Top, runnerapi.TokenLogprob{Token: t, Logprob: lp(t)})
	}
	return out
}

func isBadLogit(l float32) bool { return l != l || math.IsInf(float64(l), -1) }
