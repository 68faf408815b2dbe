package ggml

import (
	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/model"
)

// loadLayer gets block il's weights (p is "blk.N.") through must, which
// records a missing tensor.
func loadLayer(cfg model.Config, il int, p string, must func(string) ml.Tensor) layer {
	l := layer{attnNorm: must(p + "attn_norm.weight"), o: must(p + "attn_output.weight"), ffnNorm: must(p + cfg.FFNNorm())}
	switch {
	case cfg.MLA:
		if cfg.QLoraRank > 0 {
			l.qDown, l.qDownNorm, l.qUp = must(p+"attn_q_a.weight"), must(p+"attn_q_a_norm.weight"), must(p+"attn_q_b.weight")
		} else {
			l.q = must(p + "attn_q.weight")
		}
		l.kvDown, l.kvDownNorm = must(p+"attn_kv_a_mqa.weight"), must(p+"attn_kv_a_norm.weight")
		l.kAbsorb, l.vUp = must(p+"attn_k_b.weight"), must(p+"attn_v_b.weight")
	case cfg.FusedQKV:
		l.qkv = must(p + "attn_qkv.weight")
	default:
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
	switch {
	case cfg.FusedGateUp:
		l.up, l.down = must(p+"ffn_up.weight"), must(p+"ffn_down.weight")
	case cfg.IsMoE(il):
		l.router = must(p + "ffn_gate_inp.weight")
		l.gateExps, l.upExps, l.downExps = must(p+"ffn_gate_exps.weight"), must(p+"ffn_up_exps.weight"), must(p+"ffn_down_exps.weight")
		if cfg.ExpertProbsBias {
			l.probsB = must(p + "exp_probs_b.bias")
		}
		if cfg.SharedExperts > 0 {
			l.gateSh, l.upSh, l.downSh = must(p+"ffn_gate_shexp.weight"), must(p+"ffn_up_shexp.weight"), must(p+"ffn_down_shexp.weight")
		}
	default:
		l.gate, l.up, l.down = must(p+"ffn_gate.weight"), must(p+"ffn_up.weight"), must(p+"ffn_down.weight")
	}
	return l
}

// inputs are a batch's graph inputs every block reads.
type inputs struct {
	positions ml.Tensor
	// attnTemp [1, 1, n] is each position's query scale (mistral3), or nil.
	attnTemp ml.Tensor
	n        int
}

// block is transformer block il: attention and a gated MLP (SwiGLU, or
// GELU for Gemma 3, or a mixture of SwiGLU experts), each with RMSNorm
// before (and after, for Gemma 3) and a residual around. It follows
// llama.cpp's graphs op for op (src/models/llama.cpp, qwen2.cpp,
// qwen3.cpp, qwen3moe.cpp, gemma3.cpp, phi3.cpp, openai-moe.cpp,
// mistral3.cpp, deepseek2.cpp, glm4-moe.cpp), so that the two agree to the last bits
// where their kernels do.
func (r *Rank) block(c ml.Context, il int, l *layer, x ml.Tensor, in *inputs) ml.Tensor {
	n := in.n
	cfg := &r.cfg
	eps := float32(cfg.Eps)
	h := x.RMSNorm(c, l.attnNorm, eps)
	var a ml.Tensor
	if cfg.MLA {
		a = r.mla(c, il, l, h, in)
	} else {
		a = r.attention(c, il, l, h, in)
	}
	a = l.o.Mulmat(c, a)
	if r.group != nil { // each rank's heads gave a part of the sum
		a = r.allReduce(c, a, r.gpu.onGPU(il))
	}
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
		e := r.experts(c, l, h, n)
		if l.gateSh != nil { // deepseek2's and glm4moe's shared experts, beside the routed
			e = e.Add(c, l.downSh.Mulmat(c, l.gateSh.Mulmat(c, h).SILU(c, l.upSh.Mulmat(c, h))))
		}
		h = e
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
	if r.group != nil { // each rank's MLP columns gave a part of the sum
		h = r.allReduce(c, h, r.gpu.onGPU(il))
	}
	if l.ffnPostNorm != nil {
		h = h.RMSNorm(c, l.ffnPostNorm, eps)
	}
	return h.Add(c, x)
}
