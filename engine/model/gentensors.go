package model

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// genTensors lists the tensors in file order; each fills itself from a
// generator seeded by the model seed and the tensor's name.
func genTensors(o GenOptions) []gguf.WriteTensor {
	wt, et := genTypes[o.Type], genTypes[o.Type] // matrices, experts
	if o.Type == "MXFP4" {
		wt = gguf.Q8_0
	}
	hd := o.HeadDim
	oss := o.Arch == "gpt-oss"
	q, kv := uint64(o.Heads*hd), uint64(o.KVHeads*hd)
	dim, ff := uint64(o.Dim), uint64(o.FFDim)
	e, eff := uint64(o.Experts), uint64(o.ExpertFFDim)
	g := &genList{seed: o.Seed}
	add := g.add
	embStd := 1.0
	if o.Arch == "gemma3" { // scaled by √dim in the graph, and the output head
		embStd = 1 / math.Sqrt(float64(dim))
	}
	add("token_embd.weight", wt, embStd, false, dim, uint64(o.Vocab))
	if o.RopeFreqs {
		g.ts = append(g.ts, gguf.WriteTensor{Name: "rope_freqs.weight", Type: gguf.F32, Dims: []uint64{uint64(hd / 2)},
			Data: floatsData(llama3RopeFactors(o.RopeBase, hd))})
	}
	for i := 0; i < o.Layers+o.NextN; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", gguf.F32, 0.1, true, dim)
		if o.Arch == "deepseek2" {
			deepseekBlock(g, o, i, wt, et)
			continue
		}
		if o.Arch == "glm4moe" {
			glmBlock(g, o, i, wt, et)
			continue
		}
		if o.Arch == "phi3" {
			add(p+"attn_qkv.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, q+2*kv)
		} else {
			add(p+"attn_q.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, q)
			add(p+"attn_k.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, kv)
			add(p+"attn_v.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, kv)
		}
		if o.Arch == "qwen2" || oss {
			add(p+"attn_q.bias", gguf.F32, 0.02, false, q)
			add(p+"attn_k.bias", gguf.F32, 0.02, false, kv)
			add(p+"attn_v.bias", gguf.F32, 0.02, false, kv)
		}
		if o.Arch == "qwen3" || o.Arch == "qwen3moe" || o.Arch == "gemma3" {
			add(p+"attn_q_norm.weight", gguf.F32, 0.1, true, uint64(hd))
			add(p+"attn_k_norm.weight", gguf.F32, 0.1, true, uint64(hd))
		}
		add(p+"attn_output.weight", wt, 1/math.Sqrt(float64(q)), false, q, dim)
		if oss {
			// Sink logits of the order of the attention scores, so that
			// each takes a visible share.
			add(p+"attn_output.bias", gguf.F32, 0.02, false, dim)
			add(p+"attn_sinks.weight", gguf.F32, 1, false, uint64(o.Heads))
		}
		if o.Arch == "gemma3" {
			add(p+"post_attention_norm.weight", gguf.F32, 0.1, true, dim)
			add(p+"post_ffw_norm.weight", gguf.F32, 0.1, true, dim)
		}
		if oss {
			add(p+"post_attention_norm.weight", gguf.F32, 0.1, true, dim)
		} else {
			add(p+"ffn_norm.weight", gguf.F32, 0.1, true, dim)
		}
		if o.Experts > 0 {
			// The router stays F32, as llama-quantize keeps it. Its
			// larger spread gives distinct expert choices.
			add(p+"ffn_gate_inp.weight", gguf.F32, 4/math.Sqrt(float64(dim)), false, dim, e)
			if oss {
				add(p+"ffn_gate_inp.bias", gguf.F32, 0.1, false, e)
			}
			add(p+"ffn_gate_exps.weight", et, 1/math.Sqrt(float64(dim)), false, dim, eff, e)
			add(p+"ffn_up_exps.weight", et, 1/math.Sqrt(float64(dim)), false, dim, eff, e)
			add(p+"ffn_down_exps.weight", et, 1/math.Sqrt(float64(eff)), false, eff, dim, e)
			if oss {
				// Spread so that some activations (about 1 in 20000) pass the
				// SwiGLU's clamp at 7.
				add(p+"ffn_gate_exps.bias", gguf.F32, 1.5, false, eff, e)
				add(p+"ffn_up_exps.bias", gguf.F32, 1.5, false, eff, e)
				add(p+"ffn_down_exps.bias", gguf.F32, 0.02, false, dim, e)
			}
			continue
		}
		if o.Arch == "phi3" { // gate and up in one matrix, gate first
			add(p+"ffn_up.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, 2*ff)
		} else {
			add(p+"ffn_gate.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, ff)
			add(p+"ffn_up.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, ff)
		}
		add(p+"ffn_down.weight", wt, 1/math.Sqrt(float64(ff)), false, ff, dim)
	}
	add("output_norm.weight", gguf.F32, 0.1, true, dim)
	if o.Arch != "gemma3" { // Gemma ties the output to the embeddings
		add("output.weight", wt, 1/math.Sqrt(float64(dim)), false, dim, uint64(o.Vocab))
	}
	return g.ts
}

// genData writes normal(0, std) values (1 + normal for norm weights) of
// type t, a row of dims[0] at a time.
func genData(seed uint64, name string, t gguf.TensorType, std float64, norm bool, dims []uint64) func(io.Writer) error {
	return func(w io.Writer) error {
		h := fnv.New64a()
		h.Write([]byte(name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		row := int(dims[0])
		rows := 1
		for _, d := range dims[1:] {
			rows *= int(d)
		}
		vals := make([]float32, row)
		var buf []byte
		for r := 0; r < rows; r++ {
			for i := range vals {
				v := rng.NormFloat64() * std
				if norm {
					v += 1
				}
				vals[i] = float32(v)
			}
			var err error
			if buf, err = appendRow(buf[:0], t, vals); err != nil {
				return err
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
}

// appendRow appends vals (whole quant blocks) encoded as t.
func appendRow(buf []byte, t gguf.TensorType, vals []float32) ([]byte, error) {
	switch t {
	case gguf.F32:
		for _, v := range vals {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		return buf, nil
	case gguf.F16:
		for _, v := range vals {
			buf = binary.LittleEndian.AppendUint16(buf, gguf.Float32ToF16(v))
		}
		return buf, nil
	case gguf.BF16:
		for _, v := range vals {
			buf = binary.LittleEndian.AppendUint16(buf, gguf.Float32ToBF16(v))
		}
		return buf, nil
	case gguf.Q8_0:
		return gguf.AppendQ8_0(buf, vals)
	case gguf.Q4_0:
		return gguf.AppendQ4_0(buf, vals)
	case gguf.MXFP4:
		return gguf.AppendMXFP4(buf, vals)
	}
	return nil, fmt.Errorf("cannot write %s", t)
}

// llama3RopeFactors are Llama 3.1's RoPE frequency divisors for head size
// hd, as llama.cpp's converter writes them into rope_freqs.weight: 1 for
// short wavelengths, 8 for long ones, a smooth blend between.
func llama3RopeFactors(base float64, hd int) []float32 {
	const factor, low, high, oldCtx = 8.0, 1.0, 4.0, 8192.0
	out := make([]float32, hd/2)
	for i := range out {
		freq := 1 / math.Pow(base, float64(2*i)/float64(hd))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < oldCtx/high:
			out[i] = 1
		case wavelen > oldCtx/low:
			out[i] = factor
		default:
			smooth := (oldCtx/wavelen - low) / (high - low)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out
}

// floatsData writes vs as F32.
func floatsData(vs []float32) func(io.Writer) error {
	return func(w io.Writer) error {
		buf := make([]byte, 0, 4*len(vs))
		for _, v := range vs {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		_, err := w.Write(buf)
		return err
	}
}

// genList collects a generated model's tensors, in the order written.
type genList struct {
	seed uint64
	ts   []gguf.WriteTensor
}

// add appends tensor name of type t and shape dims, its values random
// with standard deviation std (around 1 for a norm's weights).
func (g *genList) add(name string, t gguf.TensorType, std float64, norm bool, dims ...uint64) {
	g.ts = append(g.ts, gguf.WriteTensor{Name: name, Type: t, Dims: dims, Data: genData(g.seed, name, t, std, norm, dims)})
}

// invSqrt is 1/√n, a matrix's standard deviation over n inputs.
func invSqrt(n int) float64 { return 1 / math.Sqrt(float64(n)) }

// deepseekBlock adds a generated deepseek2 block's tensors after attn_norm:
// MLA attention (see mlaDims) and a dense MLP (block 0) or routed and
// shared experts.
func deepseekBlock(g *genList, o GenOptions, il int, wt, et gguf.TensorType) {
	add, inv := g.add, invSqrt
	p := fmt.Sprintf("blk.%d.", il)
	ql, kvl, nope, rope, v := mlaDims(o)
	dim, heads := uint64(o.Dim), uint64(o.Heads)
	add(p+"attn_q_a.weight", wt, inv(o.Dim), false, dim, uint64(ql))
	add(p+"attn_q_a_norm.weight", gguf.F32, 0.1, true, uint64(ql))
	add(p+"attn_q_b.weight", wt, inv(ql), false, uint64(ql), heads*uint64(nope+rope))
	add(p+"attn_kv_a_mqa.weight", wt, inv(o.Dim), false, dim, uint64(kvl+rope))
	add(p+"attn_kv_a_norm.weight", gguf.F32, 0.1, true, uint64(kvl))
	// Keys (the latent through attn_k_b) of unit size, as the scores of
	// the other families: each latent dimension reaches nope of them.
	add(p+"attn_k_b.weight", wt, inv(kvl), false, uint64(nope), uint64(kvl), heads)
	add(p+"attn_v_b.weight", wt, inv(kvl), false, uint64(kvl), uint64(v), heads)
	add(p+"attn_output.weight", wt, inv(o.Heads*v), false, heads*uint64(v), dim)
	add(p+"ffn_norm.weight", gguf.F32, 0.1, true, dim)
	sharedExpertsMLP(g, o, il, wt, et)
}

// glmBlock adds a generated glm4moe block's tensors after attn_norm: GLM-4.5's
// attention (q/k/v biases, q/k norms unless NoQKNorm), the MLP's norm
// named post_attention_norm, deepseek2's MLP, and in a block after the
// trunk the multi-token-prediction tensors llama.cpp loads when asked
// for them (nextn.*; neither engine computes them here).
func glmBlock(g *genList, o GenOptions, il int, wt, et gguf.TensorType) {
	add, inv := g.add, invSqrt
	p := fmt.Sprintf("blk.%d.", il)
	dim, hd := uint64(o.Dim), uint64(o.HeadDim)
	q, kv := uint64(o.Heads)*hd, uint64(o.KVHeads)*hd
	add(p+"attn_q.weight", wt, inv(o.Dim), false, dim, q)
	add(p+"attn_k.weight", wt, inv(o.Dim), false, dim, kv)
	add(p+"attn_v.weight", wt, inv(o.Dim), false, dim, kv)
	add(p+"attn_q.bias", gguf.F32, 0.02, false, q)
	add(p+"attn_k.bias", gguf.F32, 0.02, false, kv)
	add(p+"attn_v.bias", gguf.F32, 0.02, false, kv)
	if !o.NoQKNorm {
		add(p+"attn_q_norm.weight", gguf.F32, 0.1, true, hd)
		add(p+"attn_k_norm.weight", gguf.F32, 0.1, true, hd)
	}
	add(p+"attn_output.weight", wt, inv(int(q)), false, q, dim)
	add(p+"post_attention_norm.weight", gguf.F32, 0.1, true, dim)
	sharedExpertsMLP(g, o, il, wt, et)
	if il >= o.Layers {
		add(p+"nextn.eh_proj.weight", wt, inv(2*o.Dim), false, 2*dim, dim)
		add(p+"nextn.enorm.weight", gguf.F32, 0.1, true, dim)
		add(p+"nextn.hnorm.weight", gguf.F32, 0.1, true, dim)
		add(p+"nextn.shared_head_norm.weight", gguf.F32, 0.1, true, dim)
	}
}

// sharedExpertsMLP adds a generated deepseek2 or glm4moe block's MLP after
// its norm: a dense one (block 0) or routed and shared experts.
func sharedExpertsMLP(g *genList, o GenOptions, il int, wt, et gguf.TensorType) {
	add, inv := g.add, invSqrt
	p := fmt.Sprintf("blk.%d.", il)
	dim := uint64(o.Dim)
	if il == 0 { // the leading dense block
		ff := uint64(o.FFDim)
		add(p+"ffn_gate.weight", wt, inv(o.Dim), false, dim, ff)
		add(p+"ffn_up.weight", wt, inv(o.Dim), false, dim, ff)
		add(p+"ffn_down.weight", wt, inv(o.FFDim), false, ff, dim)
		return
	}
	e, eff := uint64(o.Experts), uint64(o.ExpertFFDim)
	// Logits of std 1: the sigmoid saturates (and near-ties abound) beyond.
	add(p+"ffn_gate_inp.weight", gguf.F32, inv(o.Dim), false, dim, e)
	add(p+"exp_probs_b.bias", gguf.F32, 0.05, false, e)
	add(p+"ffn_gate_exps.weight", et, inv(o.Dim), false, dim, eff, e)
	add(p+"ffn_up_exps.weight", et, inv(o.Dim), false, dim, eff, e)
	// Down projections scaled by 0.4, so that the routed experts' weights
	// (× 2.5, expert_weights_scale) give outputs the size of the others'.
	add(p+"ffn_down_exps.weight", et, 0.4*inv(o.ExpertFFDim), false, eff, dim, e)
	add(p+"ffn_gate_shexp.weight", wt, inv(o.Dim), false, dim, eff)
	add(p+"ffn_up_shexp.weight", wt, inv(o.Dim), false, dim, eff)
	add(p+"ffn_down_shexp.weight", wt, inv(o.ExpertFFDim), false, eff, dim)
}
