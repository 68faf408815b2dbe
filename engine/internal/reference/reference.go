// Package reference is a pure-Go float64 forward pass of the architectures
// the engine supports (llama with Llama 3.x rope_freqs, mistral3, qwen2,
// qwen3, qwen3moe, gemma3, phi3, gpt-oss, deepseek2, glm4moe), written from the math
// rather than from ggml, for tests to check the ggml path against. It is
// slow and keeps everything in memory: small models only.
package reference

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

// Model holds a model's weights as float64 matrices (row = output).
type Model struct {
	Cfg    model.Config
	w      map[string][]float64
	kcache [][][]float64 // layer → position → kv heads × head dim
	vcache [][][]float64
}

// Load reads every tensor of the file at path (F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q5_K, Q6_K or MXFP4).
func Load(path string) (*Model, error) {
	f, err := gguf.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &Model{Cfg: cfg, w: map[string][]float64{}}
	for _, t := range f.Tensors {
		start := uint64(f.DataOffset) + t.Offset
		v, err := gguf.Dequantize(t.Type, data[start:start+t.Size], int(t.Elements()))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		m.w[t.Name] = v
	}
	m.Reset()
	return m, nil
}

// Reset clears the KV cache.
func (m *Model) Reset() {
	m.kcache = make([][][]float64, m.Cfg.Layers)
	m.vcache = make([][][]float64, m.Cfg.Layers)
}

// matvec returns W·x for W of `out` rows of len(x).
func matvec(w []float64, x []float64, out int) []float64 {
	in := len(x)
	y := make([]float64, out)
	for o := 0; o < out; o++ {
		row := w[o*in : (o+1)*in]
		var s float64
		for i, v := range row {
			s += v * x[i]
		}
		y[o] = s
	}
	return y
}

func rmsnorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * scale * w[i]
	}
	return y
}

// rope rotates one head at position pos: adjacent pairs (llama) or the two
// halves (NeoX, qwen2), by pos · base^(-2i/d) / scale / factors[i] (no
// factors: 1); with YaRN, ggml's blend of that and the unscaled angle
// (ggml-cpu's rope_yarn), and the magnitude attn·(1 + 0.1·ln scale).
func rope(x []float64, pos int, base, scale float64, neox bool, factors []float64, y *yarn) {
	d := len(x)
	var lo, hi float64
	if y != nil {
		corr := func(beta float64) float64 {
			return float64(d) * math.Log(float64(y.origCtx)/(beta*2*math.Pi)) / (2 * math.Log(base))
		}
		lo, hi = max(0, math.Floor(corr(y.betaFast))), min(float64(d-1), math.Ceil(corr(y.betaSlow)))
	}
	for i := 0; i < d/2; i++ {
		extrap := float64(pos) * math.Pow(base, -2*float64(i)/float64(d))
		if factors != nil {
			extrap /= factors[i]
		}
		theta, mag := extrap/scale, 1.0
		if y != nil {
			ramp := 1 - min(1, max(0, (float64(i)-lo)/max(0.001, hi-lo)))
			theta = theta*(1-ramp) + extrap*ramp
			mag = y.attn * (1 + 0.1*math.Log(scale))
		}
		c, s := math.Cos(theta)*mag, math.Sin(theta)*mag
		a, b := 2*i, 2*i+1
		if neox {
			a, b = i, i+d/2
		}
		x0, x1 := x[a], x[b]
		x[a], x[b] = x0*c-x1*s, x0*s+x1*c
	}
}

// yarn is YaRN's parameters (model.Config's), nil when not scaled so.
type yarn struct {
	origCtx            int
	betaFast, betaSlow float64
	attn               float64
}

// Step runs one token at position pos (positions must follow on from the
// cache) and returns its logits.
func (m *Model) Step(token int32, pos int) []float64 {
	c := m.Cfg
	x := append([]float64(nil), m.w["token_embd.weight"][int(token)*c.Dim:(int(token)+1)*c.Dim]...)
	if c.EmbedScale {
		for i := range x {
			x[i] *= math.Sqrt(float64(c.Dim))
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		h := rmsnorm(x, m.w[p+"attn_norm.weight"], c.Eps)
		var att []float64
		if c.MLA {
			att = m.mla(l, p, h, pos)
		} else {
			att = m.attention(l, p, h, pos)
		}
		o := matvec(m.w[p+"attn_output.weight"], att, c.Dim)
		if c.OutBias {
			for i := range o {
				o[i] += m.w[p+"attn_output.bias"][i]
			}
		}
		if c.PostNorms {
			o = rmsnorm(o, m.w[p+"post_attention_norm.weight"], c.Eps)
		}
		for i := range x {
			x[i] += o[i]
		}
		d := m.mlp(l, p, rmsnorm(x, m.w[p+c.FFNNorm()], c.Eps))
		if c.PostNorms {
			d = rmsnorm(d, m.w[p+"post_ffw_norm.weight"], c.Eps)
		}
		for i := range x {
			x[i] += d[i]
		}
	}
	h := rmsnorm(x, m.w["output_norm.weight"], c.Eps)
	out := m.w["output.weight"]
	if c.TiedOutput {
		out = m.w["token_embd.weight"]
	}
	return matvec(out, h, c.Vocab)
}

// ropeOf is layer l's RoPE: base, scale, frequency factors and YaRN.
func (m *Model) ropeOf(l int) (base, scale float64, factors []float64, y *yarn) {
	c := m.Cfg
	if c.YaRN {
		y = &yarn{origCtx: c.YaRNOrigCtx, betaFast: c.YaRNBetaFast, betaSlow: c.YaRNBetaSlow, attn: c.YaRNAttnFactor}
	}
	base, scale = c.RopeBase, c.RopeScale
	if c.IsSWA(l) {
		base, scale = c.RopeBaseSWA, c.RopeScaleSWA
	}
	return base, scale, m.w["rope_freqs.weight"], y
}

// attention is layer l's (grouped-query) attention of the normalised h at
// position pos, before the output projection.
func (m *Model) attention(l int, p string, h []float64, pos int) []float64 {
	c := m.Cfg
	hd := c.HeadDim
	var q, k, v []float64
	if c.FusedQKV {
		all := matvec(m.w[p+"attn_qkv.weight"], h, (c.Heads+2*c.KVHeads)*hd)
		q, k, v = all[:c.Heads*hd], all[c.Heads*hd:(c.Heads+c.KVHeads)*hd], all[(c.Heads+c.KVHeads)*hd:]
	} else {
		q = matvec(m.w[p+"attn_q.weight"], h, c.Heads*hd)
		k = matvec(m.w[p+"attn_k.weight"], h, c.KVHeads*hd)
		v = matvec(m.w[p+"attn_v.weight"], h, c.KVHeads*hd)
	}
	if c.QKVBias {
		for i := range q {
			q[i] += m.w[p+"attn_q.bias"][i]
		}
		for i := range k {
			k[i] += m.w[p+"attn_k.bias"][i]
			v[i] += m.w[p+"attn_v.bias"][i]
		}
	}
	base, scale, factors, y := m.ropeOf(l)
	// Only the first rd of each head's dimensions rotate (glm4moe).
	rd := c.RotaryDims()
	for hh := 0; hh < c.Heads; hh++ {
		if c.QKNorm {
			copy(q[hh*hd:], rmsnorm(q[hh*hd:(hh+1)*hd], m.w[p+"attn_q_norm.weight"], c.Eps))
		}
		rope(q[hh*hd:hh*hd+rd], pos, base, scale, c.RopeNeoX, factors, y)
		if c.AttnTempScale != 0 {
			// Ministral 3's temperature: the scale as llama.cpp
			// feeds it to ggml, a float32 per position.
			t := float64(c.AttnTemp(int32(pos)))
			for i := hh * hd; i < (hh+1)*hd; i++ {
				q[i] *= t
			}
		}
	}
	for hh := 0; hh < c.KVHeads; hh++ {
		if c.QKNorm {
			copy(k[hh*hd:], rmsnorm(k[hh*hd:(hh+1)*hd], m.w[p+"attn_k_norm.weight"], c.Eps))
		}
		rope(k[hh*hd:hh*hd+rd], pos, base, scale, c.RopeNeoX, factors, y)
	}
	m.kcache[l] = append(m.kcache[l], k)
	m.vcache[l] = append(m.vcache[l], v)
	return m.attend(l, q, pos)
}

// mla is deepseek2's multi-head latent attention at position pos, from
// its definition: each head's query, its non-rotary part taken into the
// latent space by attn_k_b, scores the cached latents (normalised) and
// rotary keys; the attended latent goes out through attn_v_b.
func (m *Model) mla(l int, p string, h []float64, pos int) []float64 {
	c := m.Cfg
	kvl, rd, kd, vd := c.KVLoraRank, c.RopeDim, c.KeyDimMLA, c.ValueDimMLA
	nope := kd - rd
	var q []float64
	if c.QLoraRank > 0 {
		qa := rmsnorm(matvec(m.w[p+"attn_q_a.weight"], h, c.QLoraRank), m.w[p+"attn_q_a_norm.weight"], c.Eps)
		q = matvec(m.w[p+"attn_q_b.weight"], qa, c.Heads*kd)
	} else {
		q = matvec(m.w[p+"attn_q.weight"], h, c.Heads*kd)
	}
	base, scale, _, y := m.ropeOf(l)
	kvpe := matvec(m.w[p+"attn_kv_a_mqa.weight"], h, kvl+rd)
	key := rmsnorm(kvpe[:kvl], m.w[p+"attn_kv_a_norm.weight"], c.Eps)
	kpe := slices.Clone(kvpe[kvl:])
	rope(kpe, pos, base, scale, false, nil, y)
	m.kcache[l] = append(m.kcache[l], append(key, kpe...))
	kb, vb := m.w[p+"attn_k_b.weight"], m.w[p+"attn_v_b.weight"] // [nope, kvl, heads], [kvl, vd, heads]
	out := make([]float64, c.Heads*vd)
	for hh := range c.Heads {
		qh := q[hh*kd : (hh+1)*kd]
		qpe := slices.Clone(qh[nope:])
		rope(qpe, pos, base, scale, false, nil, y)
		qabs := matvec(kb[hh*kvl*nope:(hh+1)*kvl*nope], qh[:nope], kvl)
		scores := make([]float64, len(m.kcache[l]))
		for t, kt := range m.kcache[l] {
			var s float64
			for r := range kvl {
				s += qabs[r] * kt[r]
			}
			for j := range rd {
				s += qpe[j] * kt[kvl+j]
			}
			scores[t] = s * c.KQScale
		}
		softmax(scores)
		lat := make([]float64, kvl)
		for t, kt := range m.kcache[l] {
			for r := range kvl {
				lat[r] += scores[t] * kt[r]
			}
		}
		copy(out[hh*vd:], matvec(vb[hh*vd*kvl:(hh+1)*vd*kvl], lat, vd))
	}
	return out
}

// mlp is layer l's MLP of the normalised h.
func (m *Model) mlp(l int, p string, h []float64) []float64 {
	c := m.Cfg
	switch {
	case c.IsMoE(l):
		d := m.experts(p, h)
		if c.SharedExperts > 0 { // deepseek2's and glm4moe's, beside the routed ones
			sh := swiglu(m.w[p+"ffn_gate_shexp.weight"], m.w[p+"ffn_up_shexp.weight"], m.w[p+"ffn_down_shexp.weight"], h, c.SharedExperts*c.ExpertFFDim)
			for i := range d {
				d[i] += sh[i]
			}
		}
		return d
	case c.FusedGateUp: // ffn_up is the gate's rows, then up's
		n := c.FFDim * c.Dim
		up := m.w[p+"ffn_up.weight"]
		return swiglu(up[:n], up[n:], m.w[p+"ffn_down.weight"], h, c.FFDim)
	case c.GELU:
		return geglu(m.w[p+"ffn_gate.weight"], m.w[p+"ffn_up.weight"], m.w[p+"ffn_down.weight"], h, c.FFDim)
	default:
		return swiglu(m.w[p+"ffn_gate.weight"], m.w[p+"ffn_up.weight"], m.w[p+"ffn_down.weight"], h, c.FFDim)
	}
}

// attend is layer l's attention of the query heads q at position pos over
// the cached keys and values (the last SlidingWindow of them on a
// sliding-window layer). With attention sinks, each head's softmax also
// spans its sink logit, which takes probability but adds no value.
func (m *Model) attend(l int, q []float64, pos int) []float64 {
	c := m.Cfg
	hd, group := c.HeadDim, c.Heads/c.KVHeads
	kqScale := 1 / math.Sqrt(float64(hd))
	if c.QueryScale != 0 {
		kqScale = c.QueryScale
	}
	// A sliding-window layer sees the last SlidingWindow positions.
	from := 0
	if c.IsSWA(l) {
		from = max(0, pos+1-c.SlidingWindow)
	}
	att := make([]float64, c.Heads*hd)
	for hh := 0; hh < c.Heads; hh++ {
		kv := hh / group
		qh := q[hh*hd : (hh+1)*hd]
		scores := make([]float64, len(m.kcache[l]))
		mx := math.Inf(-1)
		for t, kt := range m.kcache[l] {
			if t < from {
				scores[t] = math.Inf(-1)
				continue
			}
			var s float64
			for i := 0; i < hd; i++ {
				s += qh[i] * kt[kv*hd+i]
			}
			scores[t] = s * kqScale
			mx = max(mx, scores[t])
		}
		var sink float64
		if c.AttnSinks {
			sink = m.w[fmt.Sprintf("blk.%d.attn_sinks.weight", l)][hh]
			mx = max(mx, sink)
		}
		var sum float64
		for t := range scores {
			scores[t] = math.Exp(scores[t] - mx)
			sum += scores[t]
		}
		if c.AttnSinks {
			sum += math.Exp(sink - mx)
		}
		for t, vt := range m.vcache[l] {
			for i := 0; i < hd; i++ {
				att[hh*hd+i] += scores[t] / sum * vt[kv*hd+i]
			}
		}
	}
	return att
}

// swiglu is down · (silu(gate · h) ⊙ (up · h)), with ff rows in gate and up.
func swiglu(gate, up, down, h []float64, ff int) []float64 {
	g := matvec(gate, h, ff)
	u := matvec(up, h, ff)
	for i := range g {
		g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return matvec(down, g, len(h))
}

// geglu is down · (gelu(gate · h) ⊙ (up · h)), GELU in its tanh form as
// ggml and Gemma compute it.
func geglu(gate, up, down, h []float64, ff int) []float64 {
	g := matvec(gate, h, ff)
	u := matvec(up, h, ff)
	for i, x := range g {
		g[i] = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) * u[i]
	}
	return matvec(down, g, len(h))
}

// softmax is exp(x - max) / Σ, in place.
func softmax(x []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		x[i] = math.Exp(v - mx)
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

// experts is a mixture-of-experts MLP: the router's top ExpertsUsed
// experts (ties to the lower id) by its softmax over all experts, their
// weights renormalised to sum 1 when ExpertNormTopK; or (gpt-oss) by its
// logits plus bias, weighted by the softmax over the chosen ones; or
// (deepseek2) by sigmoids plus a selection bias within the best groups,
// weighted by the unbiased sigmoids, renormalised and scaled. Each expert
// is a SwiGLU, OpenAI's clamped one with biases for gpt-oss.
func (m *Model) experts(p string, h []float64) []float64 {
	c := m.Cfg
	probs := matvec(m.w[p+"ffn_gate_inp.weight"], h, c.Experts)
	if c.ExpertBiases {
		for i := range probs {
			probs[i] += m.w[p+"ffn_gate_inp.bias"][i]
		}
	}
	switch {
	case c.ExpertSigmoid:
		for i, v := range probs {
			probs[i] = 1 / (1 + math.Exp(-v))
		}
	case !c.ExpertSoftmaxTopK:
		softmax(probs)
	}
	sel := slices.Clone(probs)
	if c.ExpertProbsBias {
		for i := range sel {
			sel[i] += m.w[p+"exp_probs_b.bias"][i]
		}
	}
	if c.ExpertGroups > 1 {
		limitGroups(sel, c.ExpertGroups, c.ExpertGroupsUsed)
	}
	chosen := topK(sel, c.ExpertsUsed)
	ws := make([]float64, len(chosen))
	var wsum float64
	for i, e := range chosen {
		ws[i] = probs[e]
		wsum += probs[e]
	}
	if c.ExpertSoftmaxTopK {
		softmax(ws)
	}
	for i := range ws {
		if c.ExpertNormTopK {
			ws[i] /= wsum
		}
		if s := c.ExpertWeightsScale; s != 0 {
			ws[i] *= s
		}
	}
	out := make([]float64, c.Dim)
	n := c.ExpertFFDim * c.Dim // one expert's gate, up or down matrix
	for i, e := range chosen {
		gate, up, down := m.w[p+"ffn_gate_exps.weight"][e*n:(e+1)*n], m.w[p+"ffn_up_exps.weight"][e*n:(e+1)*n], m.w[p+"ffn_down_exps.weight"][e*n:(e+1)*n]
		var d []float64
		if c.OAISwiGLU {
			d = m.oaiExpert(p, e, gate, up, down, h)
		} else {
			d = swiglu(gate, up, down, h, c.ExpertFFDim)
		}
		for j := range out {
			out[j] += ws[i] * d[j]
		}
	}
	return out
}

// topK is the indices of x's k largest values, largest first (ties to the
// lower index).
func topK(x []float64, k int) []int {
	ids := make([]int, len(x))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(x[b], x[a]) })
	return ids[:k]
}

// limitGroups sets to −∞ the scores of all but the used groups of
// experts (of groups equal groups) whose two best scores sum highest.
func limitGroups(sel []float64, groups, used int) {
	per := len(sel) / groups
	score := make([]float64, groups)
	for g := range groups {
		top := topK(sel[g*per:(g+1)*per], 2)
		score[g] = sel[g*per+top[0]] + sel[g*per+top[1]]
	}
	keep := topK(score, used)
	for g := range groups {
		if !slices.Contains(keep, g) {
			for i := g * per; i < (g+1)*per; i++ {
				sel[i] = math.Inf(-1)
			}
		}
	}
}

// oaiExpert is gpt-oss's expert e: down · (g·σ(1.702·g) ⊙ (u + 1)) + its
// bias, where g = min(gate · h + bias, 7) and u = clamp(up · h + bias, ±7).
func (m *Model) oaiExpert(p string, e int, gate, up, down, h []float64) []float64 {
	const alpha, limit = 1.702, 7
	ff, dim := m.Cfg.ExpertFFDim, m.Cfg.Dim
	g, u := matvec(gate, h, ff), matvec(up, h, ff)
	gb, ub := m.w[p+"ffn_gate_exps.bias"][e*ff:], m.w[p+"ffn_up_exps.bias"][e*ff:]
	for i := range g {
		x := min(g[i]+gb[i], limit)
		y := min(max(u[i]+ub[i], -limit), limit)
		g[i] = x / (1 + math.Exp(-alpha*x)) * (y + 1)
	}
	d := matvec(down, g, dim)
	db := m.w[p+"ffn_down_exps.bias"][e*dim:]
	for i := range d {
		d[i] += db[i]
	}
	return d
}
