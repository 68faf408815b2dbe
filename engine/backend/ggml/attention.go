package ggml

import (
	"math"

	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/ml/nn"
	"github.com/ollama/ollama/ml/nn/rope"
)

// rope rotates x's first dims (all of a head, glm4moe's partial rotary
// part, or deepseek2's rotary part)
// at the batch's positions, with block il's base and scale and the
// model's RoPE options.
func (r *Rank) rope(c ml.Context, il int, l *layer, x ml.Tensor, dims int, in *inputs) ml.Tensor {
	cfg := &r.cfg
	var opts []func(*rope.Options)
	if cfg.RopeNeoX {
		opts = append(opts, rope.WithTypeNeoX())
	}
	if l.ropeFreqs != nil {
		opts = append(opts, rope.WithFactors(l.ropeFreqs))
	}
	if cfg.YaRN {
		opts = append(opts, rope.WithOriginalContextLength(cfg.YaRNOrigCtx), rope.WithExtrapolationFactor(1),
			rope.WithAttentionFactor(float32(cfg.YaRNAttnFactor)), rope.WithBetaFast(float32(cfg.YaRNBetaFast)),
			rope.WithBetaSlow(float32(cfg.YaRNBetaSlow)))
	}
	base, scale := float32(cfg.RopeBase), float32(1/cfg.RopeScale)
	if cfg.IsSWA(il) {
		base, scale = float32(cfg.RopeBaseSWA), float32(1/cfg.RopeScaleSWA)
	}
	return nn.RoPE(c, x, in.positions, dims, base, scale, opts...)
}

// attention is block il's multi-head (grouped-query) attention of the
// normalised h [dim, n], before the output projection: [heads × head
// dim, n].
func (r *Rank) attention(c ml.Context, il int, l *layer, h ml.Tensor, in *inputs) ml.Tensor {
	cfg := &r.cfg
	eps := float32(cfg.Eps)
	q, k, v := r.qkv(c, l, h, in.n)
	if l.qNorm != nil {
		q, k = q.RMSNorm(c, l.qNorm, eps), k.RMSNorm(c, l.kNorm, eps)
	}
	// glm4moe rotates the first RotaryDims of each head (ggml leaves the
	// rest), as llama.cpp's n_rot; the other families all of it.
	q, k = r.rope(c, il, l, q, cfg.RotaryDims(), in), r.rope(c, il, l, k, cfg.RotaryDims(), in)
	if in.attnTemp != nil {
		q = q.Mul(c, in.attnTemp)
	}
	kqScale := 1 / math.Sqrt(float64(cfg.HeadDim))
	if cfg.QueryScale != 0 {
		q, kqScale = q.Scale(c, cfg.QueryScale), 1
	}
	// Without sinks (nil) this is plain attention.
	a := nn.AttentionWithSinks(c, q, k, v, l.sinks, kqScale, r.cache)
	return a.Reshape(c, cfg.HeadDim*cfg.Heads, in.n)
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

// mla is deepseek2's multi-head latent attention of h [dim, n] as
// llama.cpp computes it with the absorption optimisation: every head
// attends to one cached latent per token (KVLoraRank values, normalised,
// plus RopeDim rotary key values), its query's non-rotary part folded
// into the latent by attn_k_b, and the attended latent expanded to its
// values by attn_v_b. Returns [heads × ValueDimMLA, n].
func (r *Rank) mla(c ml.Context, il int, l *layer, h ml.Tensor, in *inputs) ml.Tensor {
	cfg := &r.cfg
	eps, n, heads := float32(cfg.Eps), in.n, cfg.Heads
	var q ml.Tensor
	if l.qDown != nil {
		q = l.qUp.Mulmat(c, l.qDown.Mulmat(c, h).RMSNorm(c, l.qDownNorm, eps))
	} else {
		q = l.q.Mulmat(c, h)
	}
	q = q.Reshape(c, cfg.KeyDimMLA, heads, n)
	kvpe := l.kvDown.Mulmat(c, h) // [latent | rotary key, n]
	row := kvpe.Stride(1)
	latent := kvpe.View(c, 0, cfg.KVLoraRank, row, n)
	kpe := kvpe.View(c, cfg.KVLoraRank*kvpe.Stride(0), cfg.RopeDim, row, 1, row, n)
	kpe = r.rope(c, il, l, kpe, cfg.RopeDim, in)
	latent = latent.RMSNorm(c, l.kvDownNorm, eps)
	nope := cfg.KeyDimMLA - cfg.RopeDim
	qNope := q.View(c, 0, nope, q.Stride(1), heads, q.Stride(2), n)
	qPe := q.View(c, nope*q.Stride(0), cfg.RopeDim, q.Stride(1), heads, q.Stride(2), n)
	qPe = r.rope(c, il, l, qPe, cfg.RopeDim, in)
	// [nope, n, heads] through attn_k_b [nope, latent, heads]: [latent, heads, n].
	qAbs := l.kAbsorb.Mulmat(c, qNope.Permute(c, 0, 2, 1, 3)).Permute(c, 0, 2, 1, 3)
	query := qAbs.Concat(c, qPe, 0) // [latent + rotary, heads, n]
	latent = latent.Reshape(c, cfg.KVLoraRank, 1, n)
	key := latent.Concat(c, kpe, 0) // [latent + rotary, 1, n]
	a := nn.AttentionWithVMLA(c, query, key, latent, nil, l.vUp, cfg.KQScale, r.cache)
	return a.Reshape(c, cfg.ValueDimMLA*heads, n)
}
