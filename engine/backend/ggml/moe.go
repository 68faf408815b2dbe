package ggml

import (
	"math"

	"github.com/ollama/ollama/ml"
)

// minExpertWeightSum keeps the renormalisation of the chosen experts'
// weights from dividing by zero: the smallest normal f16, as llama.cpp.
const minExpertWeightSum = 6.103515625e-5

// OpenAI's SwiGLU constants (gpt-oss), as llama.cpp's build_moe_ffn.
const (
	oaiAlpha = 1.702
	oaiLimit = 7
)

// experts is a mixture-of-experts MLP for n tokens h [dim, n], as
// llama.cpp's build_moe_ffn: the router picks each token's top
// ExpertsUsed experts, whose SwiGLU outputs are summed, weighted by their
// scores: the softmax over all experts (renormalised over the chosen when
// ExpertNormTopK), the softmax over the chosen ones' logits (gpt-oss), or
// sigmoids (deepseek2: chosen with a bias and by group, renormalised and
// scaled). Only the chosen experts' weights are read (mul_mat_id), so a
// token costs the active bytes, not the total.
func (r *Rank) experts(c ml.Context, l *layer, h ml.Tensor, n int) ml.Tensor {
	cfg := &r.cfg
	used := cfg.ExpertsUsed
	probs := l.router.Mulmat(c, h) // [experts, n]
	if l.routerB != nil {
		probs = probs.Add(c, l.routerB)
	}
	switch {
	case cfg.ExpertSigmoid:
		probs = probs.Sigmoid(c)
	case !cfg.ExpertSoftmaxTopK:
		probs = probs.Softmax(c)
	}
	sel := probs // what the experts are chosen by; the weights stay probs
	if l.probsB != nil {
		sel = sel.Add(c, l.probsB)
	}
	if cfg.ExpertGroups > 1 {
		sel = r.groupSelect(c, sel, n)
	}
	chosen := sel.TopK(c, used)                              // [used, n] expert ids
	w := probs.Reshape(c, 1, cfg.Experts, n).Rows(c, chosen) // [1, used, n]
	if cfg.ExpertSoftmaxTopK {
		w = w.Reshape(c, used, n).Softmax(c).Reshape(c, 1, used, n)
	}
	if cfg.ExpertNormTopK {
		w = w.Reshape(c, used, n)
		sum := w.SumRows(c).Clamp(c, minExpertWeightSum, float32(math.Inf(1)))
		w = w.Div(c, sum).Reshape(c, 1, used, n)
	}
	if s := cfg.ExpertWeightsScale; s != 0 && s != 1 {
		w = w.Scale(c, s)
	}
	if first, count := cfg.LocalExperts(); count < cfg.Experts {
		// This rank holds some of the experts (expert parallelism).
		chosen, w = localExperts(c, chosen, w, first, count)
	}
	h = h.Reshape(c, cfg.Dim, 1, n)
	up, gate := l.upExps.MulmatID(c, h, chosen), l.gateExps.MulmatID(c, h, chosen) // [ff, used, n]
	if l.upExpsB != nil {
		up, gate = up.AddID(c, l.upExpsB, chosen), gate.AddID(c, l.gateExpsB, chosen)
	}
	var g ml.Tensor
	if cfg.OAISwiGLU {
		g = gate.SILUAlphaLimit(c, up, oaiAlpha, oaiLimit)
	} else {
		g = gate.SILU(c, up)
	}
	e := l.downExps.MulmatID(c, g, chosen) // [dim, used, n]
	if l.downExpsB != nil {
		e = e.AddID(c, l.downExpsB, chosen)
	}
	e = e.Mul(c, w)
	out := e.View(c, 0, cfg.Dim, e.Stride(2), n)
	for i := 1; i < used; i++ {
		out = out.Add(c, e.View(c, i*e.Stride(1), cfg.Dim, e.Stride(2), n))
	}
	if used == 1 && r.group != nil {
		out = out.Contiguous(c) // the all-reduce sums a contiguous tensor
	}
	return out
}

// groupSelect keeps, of each token's ExpertGroups groups of experts, the
// ExpertGroupsUsed whose two best scores sum highest, and sets the others'
// scores to −∞, as llama.cpp (DeepSeek V3's group-limited routing).
func (r *Rank) groupSelect(c ml.Context, sel ml.Tensor, n int) ml.Tensor {
	cfg := &r.cfg
	g, per := cfg.ExpertGroups, cfg.Experts/cfg.ExpertGroups
	groups := sel.Reshape(c, per, g, n)
	top2 := groups.TopK(c, 2)                                    // [2, groups, n]
	score := groups.Reshape(c, 1, per, g, n).Rows(c, top2)       // [1, 2, groups, n]
	score = score.Reshape(c, 2, g, n).SumRows(c)                 // [1, groups, n]
	best := score.Reshape(c, g, n).TopK(c, cfg.ExpertGroupsUsed) // [used groups, n]
	kept := groups.Rows(c, best)                                 // [per, used groups, n]
	masked := groups.Duplicate(c).Fill(c, float32(math.Inf(-1))) // ggml's fill is in place here
	return masked.SetRows(c, kept, best).Reshape(c, cfg.Experts, n)
}
