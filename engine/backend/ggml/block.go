package ggml

import (
	"math"

	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/nn"
	"github.com/ollama/ollama/ml/nn/rope"

	"github.com/orrery-cluster/orrery/engine/model"
)

// loadLayer gets block p's weights (p is "blk.N.") through must, which
// records a missing tensor.
func loadLayer(cfg model.Config, p string, must func(string) ml.Tensor) layer {
	l := layer{attnNorm: must(p + "attn_norm.weight"), o: must(p + "attn_output.weight"), ffnNorm: must(p + cfg.FFNNorm())}
	if cfg.FusedQKV {
		l.qkv = must(p + "attn_qkv.weight")
	} else {
		l.q, l.k, l.v = must(p+"attn_q.weight"), must(p+"attn_k.weight"), must(p+"attn_v.weight")
	}
	if cfg.QKVBias {
		l.qb, l.kb, l.vb = must(p+"attn_q.bias"), must(p+"attn_k.bias"), must(p+"attn_v.bias")
	}
	if cfg.QKNorm {
		l.qNorm, l.kNorm = must(p+"attn_q_norm.weight"), must(p+"attn_k_norm.weight")
	}
	if cfg.AttnSinks {
		l.sinks = must(p + "attn_sinks.weight")
	}
	if cfg.OutBias {
		l.ob = must(p + "attn_output.bias")
	}
	if cfg.ExpertBiases {
		l.routerB = must(p + "ffn_gate_inp.bias")
		l.gateExpsB, l.upExpsB, l.downExpsB = must(p+"ffn_gate_exps.bias"), must(p+"ffn_up_exps.bias"), must(p+"ffn_down_exps.bias")
	}
	if cfg.PostNorms {
		l.attnPostNorm, l.ffnPostNorm = must(p+"post_attention_norm.weight"), must(p+"post_ffw_norm.weight")
	}
	if cfg.RopeFreqs {
		// ollama's backend loads the model's one rope_freqs.weight as a
		// copy per block, named like the block's tensors.
		l.ropeFreqs = must(p + "rope_freqs.weight")
	}
	if cfg.FusedGateUp {
		l.up, l.down = must(p+"ffn_up.weight"), must(p+"ffn_down.weight")
	} else if cfg.Experts > 0 {
		l.router = must(p + "ffn_gate_inp.weight")
		l.gateExps, l.upExps, l.downExps = must(p+"ffn_gate_exps.weight"), must(p+"ffn_up_exps.weight"), must(p+"ffn_down_exps.weight")
	} else {
		l.gate, l.up, l.down = must(p+"ffn_gate.weight"), must(p+"ffn_up.weight"), must(p+"ffn_down.weight")
	}
	return l
}

// block is transformer block il: attention and a gated MLP (SwiGLU, or
// GELU for Gemma 3, or a mixture of SwiGLU experts), each with RMSNorm
// before (and after, for Gemma 3) and a residual around. It follows
// llama.cpp's graphs op for op (src/models/llama.cpp, qwen2.cpp,
// qwen3.cpp, qwen3moe.cpp, gemma3.cpp, phi3.cpp, openai-moe.cpp), so that the two agree to the last
// bits where their kernels do.
func (r *Rank) block(c ml.Context, il int, l *layer, x ml.Tensor, in *inputs) ml.Tensor {
	n := in.n
	cfg := &r.cfg
	eps := float32(cfg.Eps)
	h := x.RMSNorm(c, l.attnNorm, eps)
	q, k, v := r.qkv(c, l, h, n)
	if l.qNorm != nil {
		q, k = q.RMSNorm(c, l.qNorm, eps), k.RMSNorm(c, l.kNorm, eps)
	}
	var ropeOpts []func(*rope.Options)
	if cfg.RopeNeoX {
		ropeOpts = append(ropeOpts, rope.WithTypeNeoX())
	}
	if l.ropeFreqs != nil {
		ropeOpts = append(ropeOpts, rope.WithFactors(l.ropeFreqs))
	}
	if cfg.YaRN {
		ropeOpts = append(ropeOpts, rope.WithOriginalContextLength(cfg.YaRNOrigCtx), rope.WithExtrapolationFactor(1),
			rope.WithAttentionFactor(float32(cfg.YaRNAttnFactor)), rope.WithBetaFast(float32(cfg.YaRNBetaFast)),
			rope.WithBetaSlow(float32(cfg.YaRNBetaSlow)))
	}
	base, scale := float32(cfg.RopeBase), float32(1/cfg.RopeScale)
	if cfg.IsSWA(il) {
		base, scale = float32(cfg.RopeBaseSWA), float32(1/cfg.RopeScaleSWA)
	}
	q = nn.RoPE(c, q, in.positions, cfg.HeadDim, base, scale, ropeOpts...)
	k = nn.RoPE(c, k, in.positions, cfg.HeadDim, base, scale, ropeOpts...)
	if in.attnTemp != nil {
		q = q.Mul(c, in.attnTemp)
	}
	kqScale := 1 / math.Sqrt(float64(cfg.HeadDim))
	if cfg.QueryScale != 0 {
		q, kqScale = q.Scale(c, cfg.QueryScale), 1
	}
	// Without sinks (nil) this is plain attention.
	a := nn.AttentionWithSinks(c, q, k, v, l.sinks, kqScale, r.cache)
	a = a.Reshape(c, cfg.HeadDim*cfg.Heads, n)
	a = l.o.Mulmat(c, a)
	if l.ob != nil {
		a = a.Add(c, l.ob)
	}
	if l.attnPostNorm != nil {
		a = a.RMSNorm(c, l.attnPostNorm, eps)
	}
	x = a.Add(c, x)
	h = x.RMSNorm(c, l.ffnNorm, eps)
	switch {
	case l.router != nil:
		h = r.experts(c, l, h, n)
	case cfg.GELU:
		h = l.down.Mulmat(c, l.gate.Mulmat(c, h).GELU(c, l.up.Mulmat(c, h)))
	case cfg.FusedGateUp:
		// ffn_up holds the gate's rows, then the up projection's.
		gu := l.up.Mulmat(c, h)
		ff := cfg.FFDim
		g := gu.View(c, 0, ff, gu.Stride(1), n)
		u := gu.View(c, ff*gu.Stride(0), ff, gu.Stride(1), n)
		h = l.down.Mulmat(c, g.SILU(c, u))
	default:
		h = l.down.Mulmat(c, l.gate.Mulmat(c, h).SILU(c, l.up.Mulmat(c, h)))
	}
	if l.ffnPostNorm != nil {
		h = h.RMSNorm(c, l.ffnPostNorm, eps)
	}
	return h.Add(c, x)
}

// inputs are a batch's graph inputs every block reads.
type inputs struct {
	positions ml.Tensor
	// attnTemp [1, 1, n] is each position's query scale (mistral3), or nil.
	attnTemp ml.Tensor
	n        int
}

// qkv projects h [dim, n] to the heads of q, k and v, through one fused
// matrix (Phi-3; views of its rows, as llama.cpp's build_qkv) or three.
func (r *Rank) qkv(c ml.Context, l *layer, h ml.Tensor, n int) (q, k, v ml.Tensor) {
	cfg := &r.cfg
	hd := cfg.HeadDim
	if l.qkv != nil {
		all := l.qkv.Mulmat(c, h) // [q | k | v, n]
		es, row := all.Stride(0), all.Stride(1)
		qd, kvd := cfg.Heads*hd, cfg.KVHeads*hd
		q = all.View(c, 0, hd, hd*es, cfg.Heads, row, n)
		k = all.View(c, qd*es, hd, hd*es, cfg.KVHeads, row, n)
		// The cache reshapes what it stores, which a view cannot be.
		v = all.View(c, (qd+kvd)*es, hd, hd*es, cfg.KVHeads, row, n).Contiguous(c)
		return q, k, v
	}
	q, k, v = l.q.Mulmat(c, h), l.k.Mulmat(c, h), l.v.Mulmat(c, h)
	if l.qb != nil {
		q, k, v = q.Add(c, l.qb), k.Add(c, l.kb), v.Add(c, l.vb)
	}
	return q.Reshape(c, hd, cfg.Heads, n), k.Reshape(c, hd, cfg.KVHeads, n), v.Reshape(c, hd, cfg.KVHeads, n)
}

// minExpertWeightSum keeps the renormalisation of the chosen experts'
// weights from dividing by zero: the smallest normal f16, as llama.cpp.
const minExpertWeightSum = 6.103515625e-5

// OpenAI's SwiGLU constants (gpt-oss), as llama.cpp's build_moe_ffn.
const (
	oaiAlpha = 1.702
	oaiLimit = 7
)

// experts is a mixture-of-experts MLP for n tokens h [dim, n]: the
// router picks each token's top ExpertsUsed experts, whose SwiGLU outputs
// are summed, weighted by their probabilities: the softmax over all
// experts (renormalised over the chosen when ExpertNormTopK), or over the
// chosen ones' logits (gpt-oss). Only the chosen experts' weights are read
// (mul_mat_id), so a token costs the active bytes, not the total.
func (r *Rank) experts(c ml.Context, l *layer, h ml.Tensor, n int) ml.Tensor {
	cfg := &r.cfg
	used := cfg.ExpertsUsed
	probs := l.router.Mulmat(c, h) // [experts, n]
	if l.routerB != nil {
		probs = probs.Add(c, l.routerB)
	}
	if !cfg.ExpertSoftmaxTopK {
		probs = probs.Softmax(c)
	}
	chosen := probs.TopK(c, used)                            // [used, n] expert ids
	w := probs.Reshape(c, 1, cfg.Experts, n).Rows(c, chosen) // [1, used, n]
	if cfg.ExpertSoftmaxTopK {
		w = w.Reshape(c, used, n).Softmax(c).Reshape(c, 1, used, n)
	}
	if cfg.ExpertNormTopK {
		w = w.Reshape(c, used, n)
		sum := w.SumRows(c).Clamp(c, minExpertWeightSum, float32(math.Inf(1)))
		w = w.Div(c, sum).Reshape(c, 1, used, n)
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
	return out
}
