package model

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// Every family gen-model writes reads back as its architecture with the
// family's fields (engine/split's TestMiddleShardOfEveryFamily holds its
// shards).
func TestFamiliesGenerateAndConfig(t *testing.T) {
	for _, fam := range Families {
		t.Run(fam, func(t *testing.T) {
			o, err := ApplyFamily(Presets["tiny"], fam)
			if err != nil {
				t.Fatal(err)
			}
			_, f := genTiny(t, o)
			c, err := FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			qkNorm := fam == "qwen3" || fam == "qwen3moe" || fam == "gemma3" || fam == "glm4moe"
			wantHD := 16
			switch {
			case qkNorm && fam != "glm4moe":
				wantHD = 32 // twice dim/heads, as Qwen3's 128 against 1024/16
			case fam == "deepseek2":
				wantHD = 64 + 16 // the cache's key: latent and rotary part
			}
			norm := c.Arch == "llama" || c.Arch == "mistral3" || c.Arch == "deepseek2"
			if c.HeadDim != wantHD || c.QKNorm != qkNorm || c.RopeFreqs != (fam == "llama3") || c.RopeNeoX == norm {
				t.Errorf("config %+v", c)
			}
			gemma := fam == "gemma3"
			if c.EmbedScale != gemma || c.PostNorms != gemma || c.GELU != gemma || c.TiedOutput != gemma ||
				gemma && (c.SlidingWindow != 64 || c.SWAPattern != 6 || c.RopeBaseSWA != 10000 || c.QueryScale != float64(1/float32(math.Sqrt(32))) || c.Eps != float64(float32(1e-6))) {
				t.Errorf("gemma3 fields: %+v", c)
			}
			if c.FusedQKV != (fam == "phi3") || c.FusedGateUp != (fam == "phi3") {
				t.Errorf("fused: %+v", c)
			}
			// mistral3: YaRN ×16 over 512/16 with log multiplier 1, whose
			// attention factor is 1/(1 + 0.1·ln 16); the temperature's
			// floor is that original context.
			m3 := fam == "mistral3"
			ln16 := float32(math.Log(16))
			if m3 && (!c.YaRN || c.RopeScale != 16 || c.YaRNOrigCtx != 32 || c.YaRNAttnFactor != float64(1/(float32(0.1*ln16)+1)) ||
				c.AttnTempScale != float64(float32(0.1)) || c.AttnTempFloor != 32 || c.AttnTemp(31) != 1 ||
				c.AttnTemp(32) != float32(1+0.1*math.Log(2)) || c.AttnTemp(100) != float32(1+0.1*math.Log(4))) || !m3 && c.AttnTempScale != 0 {
				t.Errorf("mistral3 fields: %+v; temperature at 31, 32, 100: %v %v %v", c, c.AttnTemp(31), c.AttnTemp(32), c.AttnTemp(100))
			}
			// gpt-oss: every other layer (the even ones) on a window of
			// 512/8 with the global layers' RoPE, YaRN ×32 over 4096,
			// sinks, biases, OpenAI's SwiGLU.
			if oss := fam == "gpt-oss"; c.AttnSinks != oss || c.OutBias != oss || c.ExpertBiases != oss || c.OAISwiGLU != oss || c.QKVBias != (oss || fam == "qwen2" || fam == "glm4moe") ||
				oss && (c.SlidingWindow != 64 || c.SWAPattern != 2 || !c.IsSWA(0) || c.IsSWA(1) || !c.IsSWA(2) || c.RopeBaseSWA != 150000 ||
					c.RopeScaleSWA != 32 || !c.YaRN || c.YaRNOrigCtx != 4096 || c.FFNNorm() != "post_attention_norm.weight") {
				t.Errorf("gpt-oss fields: %+v", c)
			}
			checkDeepSeek2(t, c, fam == "deepseek2")
			checkGLM4MoE(t, c, fam == "glm4moe")
			oss := fam == "gpt-oss"
			if fam == "qwen3moe" || oss || fam == "deepseek2" || fam == "glm4moe" {
				if c.Experts != 8 || c.ExpertsUsed != 2 || c.ExpertFFDim != 64 || c.ExpertNormTopK != !oss || c.ExpertSoftmaxTopK != oss || c.ExpertSigmoid != (fam == "deepseek2" || fam == "glm4moe") {
					t.Errorf("experts: %+v", c)
				}
				if !strings.Contains(c.String(), "2 of 8 experts of ff 64") {
					t.Errorf("String() = %q", c.String())
				}
			} else if c.Experts != 0 {
				t.Errorf("%s has %d experts", fam, c.Experts)
			}
		})
	}
	if _, err := ApplyFamily(Presets["tiny"], "mamba"); err == nil || !strings.Contains(err.Error(), "deepseek2") {
		t.Errorf("ApplyFamily(mamba) = %v, want a refusal listing the families", err)
	}
}

// checkDeepSeek2 holds a generated deepseek2's MLA and expert fields (the
// tiny preset: heads of 16, so latent 64, rotary 16, non-rotary 32,
// values 16, q rank 32) to what mlaDims and deepseekMetadata write, and
// others to none of them.
func checkDeepSeek2(t *testing.T, c Config, ds bool) {
	t.Helper()
	if !ds {
		if c.MLA || c.KQScale != 0 || c.ExpertGroups != 0 || c.ValueDim != 0 || c.Arch != "glm4moe" && (c.SharedExperts != 0 || c.LeadDense != 0) {
			t.Errorf("deepseek2 fields outside deepseek2: %+v", c)
		}
		return
	}
	// YaRN ×40: attention factor 1/(1 + 0.1·ln 40), undone in the scale,
	// whose log multiplier (stored as 0.1) squares the magnitude back in.
	ln := float32(math.Log(40))
	m := float32(0.1*ln) + 1
	af := 1 / m
	ms := af * m * m
	wantKQ := float64(ms * ms / float32(math.Sqrt(48)))
	if !c.MLA || c.QLoraRank != 32 || c.KVLoraRank != 64 || c.RopeDim != 16 || c.KeyDimMLA != 48 || c.ValueDimMLA != 16 ||
		c.ValueDim != 64 || c.KVHeads != 1 || c.KVWidth() != 80+64 || c.LeadDense != 1 || c.IsMoE(0) || !c.IsMoE(1) ||
		c.SharedExperts != 1 || !c.ExpertProbsBias || c.ExpertWeightsScale != 2.5 || c.ExpertGroups != 4 || c.ExpertGroupsUsed != 2 ||
		!c.ExpertNormTopK || !c.YaRN || c.RopeScale != 40 || c.YaRNAttnFactor != float64(af) || c.KQScale != wantKQ {
		t.Errorf("deepseek2 fields: %+v (kq scale want %v)", c, wantKQ)
	}
}

// checkGLM4MoE holds a generated glm4moe (the tiny preset: 4 trunk
// blocks of heads of 16, and one multi-token-prediction block after
// them) to GLM-4.5's conventions as gen-model writes them: half of each
// head rotary, NeoX, the MLP's norm post_attention_norm, deepseek2's
// experts without groups; and others to no partial rotary or MTP.
func checkGLM4MoE(t *testing.T, c Config, glm bool) {
	t.Helper()
	if !glm {
		if c.NextN != 0 || !c.MLA && c.RotaryDims() != c.HeadDim {
			t.Errorf("glm4moe fields outside glm4moe: %+v", c)
		}
		return
	}
	if c.Layers != 4 || c.NextN != 1 || c.FileBlocks() != 5 || c.RopeDim != 8 || c.RotaryDims() != 8 || c.HeadDim != 16 || !c.RopeNeoX ||
		c.FFNNorm() != "post_attention_norm.weight" || c.LeadDense != 1 || c.IsMoE(0) || !c.IsMoE(1) || c.SharedExperts != 1 ||
		!c.ExpertProbsBias || c.ExpertWeightsScale != 2.5 || c.ExpertGroups != 0 || !c.ExpertNormTopK || c.MLA || c.YaRN ||
		c.RopeBase != 1e6 || !c.QKNorm || !c.QKVBias {
		t.Errorf("glm4moe fields: %+v", c)
	}
}

// The 1b-class MoE presets read a small part of their weights per token,
// as the real mixture-of-experts models do.
func TestMoEPresetActiveShare(t *testing.T) {
	for _, fam := range []string{"qwen3moe", "gpt-oss", "deepseek2", "glm4moe"} {
		o, err := ApplyFamily(Presets["1b"], fam)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.fill(); err != nil {
			t.Fatal(err)
		}
		checkActiveShare(t, fam, o)
	}
}

func checkActiveShare(t *testing.T, fam string, o GenOptions) {
	t.Helper()
	var total, active uint64
	for _, ts := range genTensors(o) {
		n := uint64(1)
		for _, d := range ts.Dims {
			n *= d
		}
		total += n
		switch {
		case strings.Contains(ts.Name, "_exps."):
			active += n * uint64(o.ExpertsUsed) / uint64(o.Experts)
		case ts.Name == "token_embd.weight": // one row per token
			active += ts.Dims[0]
		default:
			active += n
		}
	}
	if share := float64(active) / float64(total); total < 1.5e9 || share > 0.25 {
		t.Errorf("%s 1b: %d weights, %.0f %% active; want ≥ 1.5 G and ≤ 25 %%", fam, total, 100*share)
	}
}

// Metadata outside what a family supports is refused with an error that
// names the key.
func TestFamilyRefusals(t *testing.T) {
	gen := func(fam string) *gguf.File {
		o, err := ApplyFamily(Presets["tiny"], fam)
		if err != nil {
			t.Fatal(err)
		}
		_, f := genTiny(t, o)
		return f
	}
	for _, c := range []struct {
		fam, key string
		v        any
		want     []string
	}{
		{"llama", "llama.rope.scaling.type", "longrope", []string{"llama.rope.scaling.type", `"longrope"`, "not supported yet"}},
		{"gemma3", "gemma3.rope.scaling.type", "yarn", []string{"gemma3.rope.scaling.type", "not supported for gemma3 yet"}},
		{"qwen3", "qwen3.rope.scaling.type", "wavy", []string{"qwen3.rope.scaling.type", `"wavy"`, "not a RoPE scaling type"}},
		{"llama", "llama.rope.scaling.factor", float32(-2), []string{"llama.rope.scaling.factor", "want > 0"}},
		{"llama", "llama.rope.scaling.attn_factor", float32(2), []string{"llama.rope.scaling.attn_factor = 2 without YaRN"}},
		{"qwen3", "qwen3.attention.value_length", uint32(16), []string{"qwen3.attention.value_length"}},
		{"qwen3", "qwen3.rope.dimension_count", uint32(16), []string{"qwen3.rope.dimension_count", "partial rotary"}},
		{"qwen3", "qwen3.attention.key_length", uint32(7), []string{"qwen3.attention.key_length"}},
		{"qwen3moe", "qwen3moe.expert_used_count", uint32(9), []string{"qwen3moe.expert_used_count", "1..qwen3moe.expert_count (8)"}},
		{"qwen3moe", "qwen3moe.expert_count", uint32(0), []string{"qwen3moe.expert_count"}},
		{"qwen3moe", "qwen3moe.expert_shared_count", uint32(1), []string{"qwen3moe.expert_shared_count", "shared experts"}},
		{"qwen3moe", "qwen3moe.expert_feed_forward_length", uint32(32), []string{"blk.0.ffn_", "_exps.weight is ["}},
		{"phi3", "phi3.rope.scaling.type", "longrope", []string{"phi3.rope.scaling.type", "not supported yet"}},
		{"gemma3", "gemma3.final_logit_softcapping", float32(30), []string{"gemma3.final_logit_softcapping", "not supported"}},
		{"gemma3", "gemma3.attention.sliding_window_pattern", []bool{true, false}, []string{"gemma3.attention.sliding_window_pattern", "arrays are not supported"}},
		{"mistral3", "mistral3.expert_count", uint32(8), []string{"mistral3.expert_count", "mixture of experts is not supported"}},
		{"mistral3", "mistral3.attention.temperature_scale", float32(math.Inf(1)), []string{"mistral3.attention.temperature_scale"}},
		{"deepseek2", "deepseek2.attention.head_count_kv", uint32(4), []string{"deepseek2.attention.head_count_kv = 4", "one latent kv head"}},
		{"deepseek2", "deepseek2.attention.key_length_mla", uint32(0), []string{"attn_kv_b", "convert it again"}},
		{"deepseek2", "deepseek2.attention.key_length", uint32(96), []string{"deepseek2.attention.key_length = 96", "kv_lora_rank + rope.dimension_count = 80"}},
		{"deepseek2", "deepseek2.expert_gating_func", uint32(3), []string{"deepseek2.expert_gating_func = 3"}},
		{"deepseek2", "deepseek2.expert_group_count", uint32(3), []string{"deepseek2.expert_group_count = 3"}},
		{"deepseek2", "deepseek2.attention.temperature_scale", float32(0.1), []string{"deepseek2.attention.temperature_scale", "not supported yet"}},
		{"gpt-oss", "gpt-oss.attention.sliding_window", uint32(0), []string{"gpt-oss.attention.sliding_window = 0"}},
		{"gpt-oss", "gpt-oss.expert_weights_scale", float32(2.5), []string{"gpt-oss.expert_weights_scale", "not supported"}},
		{"gpt-oss", "gpt-oss.expert_used_count", uint32(0), []string{"gpt-oss.expert_used_count"}},
		{"glm4moe", "glm4moe.nextn_predict_layers", uint32(5), []string{"glm4moe.nextn_predict_layers = 5", "fewer than block_count"}},
		{"glm4moe", "glm4moe.rope.dimension_count", uint32(7), []string{"glm4moe.rope.dimension_count = 7", "up to the head size 16"}},
		{"glm4moe", "glm4moe.rope.dimension_count", uint32(18), []string{"glm4moe.rope.dimension_count = 18"}},
		{"glm4moe", "glm4moe.rope.dimension_sections", []int32{8, 4, 4, 0}, []string{"glm4moe.rope.dimension_sections", "M-RoPE"}},
		{"glm4moe", "glm4moe.attention.value_length", uint32(8), []string{"glm4moe.attention.value_length = 8"}},
		{"glm4moe", "glm4moe.expert_gating_func", uint32(3), []string{"glm4moe.expert_gating_func = 3"}},
		{"glm4moe", "glm4moe.leading_dense_block_count", uint32(5), []string{"glm4moe.leading_dense_block_count = 5", "0..4"}},
		{"glm4moe", "glm4moe.expert_group_count", uint32(3), []string{"glm4moe.expert_group_count = 3"}},
	} {
		_, err := FromGGUF(gen(c.fam).With(c.key, c.v))
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s with %s = %v: err = %v, want it to say %q", c.fam, c.key, c.v, err, w)
				break
			}
		}
	}
	// Linear scaling divides the positions; "none" ignores the factor.
	f := gen("llama").With("llama.rope.scaling.factor", float32(4))
	if c, err := FromGGUF(f); err != nil || c.RopeScale != 4 {
		t.Errorf("linear ×4: scale %v, %v", c.RopeScale, err)
	}
	if c, err := FromGGUF(f.With("llama.rope.scaling.type", "none")); err != nil || c.RopeScale != 1 {
		t.Errorf("none: scale %v, %v", c.RopeScale, err)
	}
	// YaRN: llama.cpp's parameters, the attention factor computed in
	// float32 (1 for factor 4: ggml's own magnitude is cancelled); a
	// DeepSeek-style log multiplier is refused.
	f = gen("qwen3").With("qwen3.rope.scaling.type", "yarn").With("qwen3.rope.scaling.factor", float32(4)).With("qwen3.rope.scaling.original_context_length", uint32(32768))
	if c, err := FromGGUF(f); err != nil || !c.YaRN || c.YaRNOrigCtx != 32768 || c.RopeScale != 4 || c.YaRNBetaFast != 32 ||
		c.YaRNBetaSlow != 1 || math.Abs(c.YaRNAttnFactor-1) > 1e-7 {
		t.Errorf("yarn ×4: %+v, %v", c, err)
	}
	if _, err := FromGGUF(f.With("qwen3.rope.scaling.yarn_log_multiplier", float32(0.1))); err == nil ||
		!strings.Contains(err.Error(), "qwen3.rope.scaling.yarn_log_multiplier") {
		t.Errorf("yarn log multiplier: %v", err)
	}
	// rope_freqs outside llama, or of the wrong size, is refused.
	f = gen("llama3")
	f = &gguf.File{KV: f.KV, Tensors: slices.Clone(f.Tensors)}
	for i := range f.Tensors {
		if f.Tensors[i].Name == "rope_freqs.weight" {
			f.Tensors[i].Dims = []uint64{4}
		}
	}
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "rope_freqs.weight is F32 [4], want F32 [8]") {
		t.Errorf("short rope_freqs: %v", err)
	}
	f = gen("qwen3")
	f.Tensors = append(f.Tensors, gguf.TensorInfo{Name: "rope_freqs.weight", Type: gguf.F32, Dims: []uint64{16}})
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "supported for llama and mistral3 only") {
		t.Errorf("qwen3 with rope_freqs: %v", err)
	}
	// Phi-3's 128k variants (LongRoPE factors) are refused by tensor name.
	f = gen("phi3")
	f = &gguf.File{KV: f.KV, Tensors: append(slices.Clone(f.Tensors), gguf.TensorInfo{Name: "rope_factors_long.weight", Type: gguf.F32, Dims: []uint64{8}})}
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "rope_factors_long.weight: LongRoPE") {
		t.Errorf("phi3 with rope_factors_long: %v", err)
	}
	// Without the log multiplier, deepseek2's YaRN factor is the usual one
	// and the softmax scale takes YaRN's magnitude only.
	f = gen("deepseek2")
	f = &gguf.File{KV: slices.DeleteFunc(slices.Clone(f.KV), func(kv gguf.KV) bool { return kv.Key == "deepseek2.rope.scaling.yarn_log_multiplier" }), Tensors: f.Tensors}
	m := float32(0.1*float32(math.Log(40))) + 1
	af := m * (1 / m)
	if c, err := FromGGUF(f); err != nil || c.YaRNAttnFactor != float64(af) || c.KQScale != float64(af*m*(af*m)/float32(math.Sqrt(48))) {
		t.Errorf("deepseek2 without a log multiplier: attention factor %v, kq scale %v, %v", c.YaRNAttnFactor, c.KQScale, err)
	}
	// A mistral3 MLP with biases is refused by name.
	f = gen("mistral3")
	f.Tensors = append(f.Tensors, gguf.TensorInfo{Name: "blk.0.ffn_up.bias", Type: gguf.F32, Dims: []uint64{192}})
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "blk.0.ffn_up.bias: MLP biases") {
		t.Errorf("mistral3 with an MLP bias: %v", err)
	}
	// gpt-oss without a window, or without a block's sinks, is refused.
	f = gen("gpt-oss")
	f = &gguf.File{KV: slices.DeleteFunc(slices.Clone(f.KV), func(kv gguf.KV) bool { return kv.Key == "gpt-oss.attention.sliding_window" }), Tensors: f.Tensors}
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "no gpt-oss.attention.sliding_window") {
		t.Errorf("gpt-oss without a window: %v", err)
	}
	f = gen("gpt-oss")
	f.Tensors = slices.DeleteFunc(f.Tensors, func(t gguf.TensorInfo) bool { return t.Name == "blk.1.attn_sinks.weight" })
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "no blk.1.attn_sinks.weight tensor") {
		t.Errorf("gpt-oss without sinks: %v", err)
	}
	checkGLM4MoEFiles(t, gen("glm4moe"))
	// A qwen3 block without its q norm is refused by name.
	f = gen("qwen3")
	f.Tensors = slices.DeleteFunc(f.Tensors, func(t gguf.TensorInfo) bool { return t.Name == "blk.2.attn_q_norm.weight" })
	if _, err := FromGGUF(f); err == nil || !strings.Contains(err.Error(), "no blk.2.attn_q_norm.weight tensor") {
		t.Errorf("qwen3 without a q norm: %v", err)
	}
}

// checkGLM4MoEFiles holds glm4moe's reader to llama.cpp's on variants of
// a generated file f: its required expert_shared_count and selection
// biases, its q/k norms optional (GLM-4.5-Air has none) but all or none,
// its gating sigmoid when unset, and a file without its MTP block (the
// converter's --no-mtp: no nextn_predict_layers) the same trunk.
func checkGLM4MoEFiles(t *testing.T, f *gguf.File) {
	t.Helper()
	without := func(keys ...string) *gguf.File {
		return &gguf.File{KV: slices.DeleteFunc(slices.Clone(f.KV), func(kv gguf.KV) bool { return slices.Contains(keys, kv.Key) }), Tensors: f.Tensors}
	}
	dropTensors := func(g *gguf.File, drop func(string) bool) *gguf.File {
		return &gguf.File{KV: g.KV, Tensors: slices.DeleteFunc(slices.Clone(g.Tensors), func(t gguf.TensorInfo) bool { return drop(t.Name) })}
	}
	if _, err := FromGGUF(without("glm4moe.expert_shared_count")); err == nil || !strings.Contains(err.Error(), "no glm4moe.expert_shared_count") {
		t.Errorf("glm4moe without expert_shared_count: %v", err)
	}
	g := dropTensors(f, func(n string) bool { return n == "blk.2.exp_probs_b.bias" })
	if _, err := FromGGUF(g); err == nil || !strings.Contains(err.Error(), "no blk.2.exp_probs_b.bias tensor") {
		t.Errorf("glm4moe without a selection bias: %v", err)
	}
	g = dropTensors(f, func(n string) bool {
		return strings.HasSuffix(n, "attn_q_norm.weight") || strings.HasSuffix(n, "attn_k_norm.weight")
	})
	if c, err := FromGGUF(g); err != nil || c.QKNorm {
		t.Errorf("glm4moe without q/k norms (GLM-4.5-Air): QKNorm %v, %v", c.QKNorm, err)
	}
	g = dropTensors(f, func(n string) bool { return n == "blk.3.attn_k_norm.weight" })
	if _, err := FromGGUF(g); err == nil || !strings.Contains(err.Error(), "no blk.3.attn_k_norm.weight tensor") {
		t.Errorf("glm4moe without one k norm: %v", err)
	}
	if c, err := FromGGUF(without("glm4moe.expert_gating_func")); err != nil || !c.ExpertSigmoid {
		t.Errorf("glm4moe without a gating function: sigmoid %v, %v", c.ExpertSigmoid, err)
	}
	if c, err := FromGGUF(f.With("glm4moe.expert_gating_func", uint32(1))); err != nil || c.ExpertSigmoid {
		t.Errorf("glm4moe with softmax gating: sigmoid %v, %v", c.ExpertSigmoid, err)
	}
	// Without its MTP block, as the converter's --no-mtp writes it.
	g = dropTensors(without("glm4moe.nextn_predict_layers").With("glm4moe.block_count", uint32(4)), func(n string) bool { return strings.HasPrefix(n, "blk.4.") })
	if c, err := FromGGUF(g); err != nil || c.Layers != 4 || c.NextN != 0 {
		t.Errorf("glm4moe without its MTP block: %d layers, %d MTP, %v", c.Layers, c.NextN, err)
	}
	// Only its trunk is checked: an MTP block of other shapes loads.
	g = dropTensors(f, func(n string) bool { return strings.HasPrefix(n, "blk.4.ffn_") })
	if c, err := FromGGUF(g); err != nil || c.Layers != 4 || c.NextN != 1 {
		t.Errorf("glm4moe with a partial MTP block: %d layers, %d MTP, %v", c.Layers, c.NextN, err)
	}
}

// ActiveBytes counts the chosen experts' share and one embedding row.
func TestActiveBytes(t *testing.T) {
	for _, fam := range []string{"llama", "qwen3moe", "gpt-oss", "glm4moe"} {
		o, _ := ApplyFamily(Presets["tiny"], fam)
		_, f := genTiny(t, o)
		c, err := FromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		var want, total uint64
		for _, ti := range f.Tensors {
			total += ti.Size
			switch {
			case strings.HasPrefix(ti.Name, "blk.4."): // glm4moe's MTP block: not computed
			case strings.Contains(ti.Name, "_exps."):
				want += ti.Size / 4 // 2 of 8 experts
			case ti.Name == "token_embd.weight":
				want += ti.Size / 512 // one of 512 rows
			default:
				want += ti.Size
			}
		}
		if got := ActiveBytes(f, c); got != want || got >= total {
			t.Errorf("%s: ActiveBytes %d, want %d (of %d)", fam, got, want, total)
		}
	}
}
