package runner

import (
	"math"
	"slices"
)

// MaxTopLogprobs bounds the alternatives reported per token (OpenAI's
// legacy completions allow 5, its chat completions 20).
const MaxTopLogprobs = 20

// TokenLogprob is one token and its log probability. Text is the token's
// text, filled in on rank 0 (the link carries ids only).
type TokenLogprob struct {
	Token   int32   `json:"token"`
	Logprob float32 `json:"logprob"`
	Text    string  `json:"text"`
}

// Logprobs are a sampled token's log probability and the most likely
// tokens at its position, most likely first: the log-softmax of the raw
// logits, before temperature and filtering (as llama.cpp's n_probs).
type Logprobs struct {
	TokenLogprob
	Top []TokenLogprob `json:"top,omitempty"`
}

// logprobsOf computes the log-softmax of logits for token id and the top
// n tokens. NaN logits count as -Inf.
func logprobsOf(logits []float32, id int32, n int) *Logprobs {
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
	out := &Logprobs{TokenLogprob: TokenLogprob{Token: id, Logprob: lp(id)}}
	n = min(n, MaxTopLogprobs, len(logits))
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
		out.Top = append(out.Top, TokenLogprob{Token: t, Logprob: lp(t)})
	}
	return out
}

func isBadLogit(l float32) bool { return l != l || math.IsInf(float64(l), -1) }
