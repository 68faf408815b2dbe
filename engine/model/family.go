package model

// Each family's metadata, read as llama.cpp reads it.

import (
	"fmt"
	"math"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// ropeScale reads the RoPE scaling as llama.cpp does: the type defaults
// to linear, whose factor divides the positions; "none" ignores the
// factor. YaRN and LongRoPE change more than the frequencies and are
// refused, as is any type llama.cpp does not know.
func ropeScale(f *gguf.File, arch string) (float64, error) {
	key := arch + ".rope.scaling.type"
	typ := f.String(key, "linear")
	switch typ {
	case "none":
		return 1, nil
	case "linear":
	case "yarn":
		if arch == "gemma3" || arch == "phi3" {
			return 0, fmt.Errorf("%s model: %s = %q is not supported for %s yet", arch, key, typ, arch)
		}
	case "longrope":
		return 0, fmt.Errorf("%s model: %s = %q is not supported yet (supported: none, linear, yarn, and Llama 3's rope_freqs)", arch, key, typ)
	default:
		return 0, fmt.Errorf("%s model: %s = %q is not a RoPE scaling type (supported: none, linear, yarn)", arch, key, typ)
	}
	v, ok := f.Get(arch + ".rope.scaling.factor")
	if !ok {
		return 1, nil
	}
	s, ok := v.(float32)
	switch {
	case !ok:
		return 0, fmt.Errorf("%s model: %s.rope.scaling.factor is %T, want a float32", arch, arch, v)
	case s == 0:
		return 1, nil // llama.cpp reads 0 as unset
	case !(s > 0) || math.IsInf(float64(s), 0):
		return 0, fmt.Errorf("%s model: %s.rope.scaling.factor = %v, want > 0", arch, arch, s)
	}
	return float64(s), nil
}

// readYaRN reads YaRN's parameters when the scaling type is yarn, and
// derives the attention factor llama.cpp passes to ggml_rope_ext
// (llama-context.cpp): the magnitude 1 + 0.1·ln(factor) (over
// 1 + 0.1·L·ln(factor) with mistral3's yarn_log_multiplier L) times
// rope.scaling.attn_factor, divided by the same 1 + 0.1·ln(factor) that
// ggml's rope multiplies in itself, all in float32 as there. A
// yarn_log_multiplier elsewhere (DeepSeek's) is refused: llama.cpp reads
// it for mistral3 only among the supported architectures.
func readYaRN(c *Config, f *gguf.File) error {
	k := func(s string) string { return c.Arch + ".rope.scaling." + s }
	if f.String(k("type"), "linear") != "yarn" {
		// llama.cpp would scale the rotated q and k by it all the same.
		if v := f.Float(k("attn_factor"), 1); v != 1 {
			return fmt.Errorf("%s model: %s = %v without YaRN is not supported", c.Arch, k("attn_factor"), v)
		}
		return nil
	}
	logMul := float32(f.Float(k("yarn_log_multiplier"), 0))
	if logMul != 0 && c.Arch != "mistral3" && c.Arch != "deepseek2" {
		return fmt.Errorf("%s model: %s = %v is not supported", c.Arch, k("yarn_log_multiplier"), logMul)
	}
	c.YaRN = true
	c.YaRNOrigCtx = int(f.Uint(k("original_context_length"), uint64(c.ContextLen)))
	if c.YaRNOrigCtx <= 0 || c.YaRNOrigCtx > 1<<24 {
		return fmt.Errorf("%s model: %s = %d", c.Arch, k("original_context_length"), c.YaRNOrigCtx)
	}
	c.YaRNBetaFast, c.YaRNBetaSlow = f.Float(k("yarn_beta_fast"), 32), f.Float(k("yarn_beta_slow"), 1)
	// llama.cpp's factor: 1 / freq_scale, both in float32.
	factor := 1 / (1 / float32(c.RopeScale))
	attn := float32(1)
	if factor > 1 {
		ln := float32(math.Log(float64(factor)))
		// Conversions keep Go from fusing these into FMAs, which C does not.
		m := float32(0.1*ln) + 1
		switch {
		case logMul != 0 && c.Arch == "deepseek2":
			// Its converter stores 0.1 × mscale_all_dim, which llama.cpp
			// takes back; mscale is then mscale_all_dim itself, so the
			// quotient is exactly 1 (llama-context.cpp).
			attn = 1
		case logMul != 0:
			attn = m / (float32(float32(0.1*logMul)*ln) + 1)
		default:
			attn = m
		}
		attn *= 1 / m
	}
	c.YaRNAttnFactor = float64(attn * float32(f.Float(k("attn_factor"), 1)))
	return nil
}

// readMistral3 reads Ministral 3's attention temperature as llama.cpp does
// (src/models/mistral3.cpp): its floor is the original context length. A
// mixture of experts is refused: no Ministral 3 has one.
func readMistral3(c *Config, f *gguf.File) error {
	k := func(s string) string { return c.Arch + "." + s }
	if n := f.Uint(k("expert_count"), 0); n != 0 {
		return fmt.Errorf("%s model: %s = %d: a mistral3 mixture of experts is not supported", c.Arch, k("expert_count"), n)
	}
	c.AttnTempScale = float64(float32(f.Float(k("attention.temperature_scale"), 0)))
	if c.AttnTempScale == 0 {
		return nil
	}
	c.AttnTempFloor = int(f.Uint(k("rope.scaling.original_context_length"), uint64(c.ContextLen)))
	if c.AttnTempFloor <= 0 || c.AttnTempFloor > 1<<24 || math.IsNaN(c.AttnTempScale) || math.IsInf(c.AttnTempScale, 0) {
		return fmt.Errorf("%s model: %s = %v with an original context of %d", c.Arch, k("attention.temperature_scale"), c.AttnTempScale, c.AttnTempFloor)
	}
	return nil
}

// AttnTemp is the query scale at position pos (AttnTempScale ≠ 0),
// computed as llama.cpp's llm_graph_input_attn_temp: the quotient and
// floor in float32, the log in double, the result rounded to float32.
func (c Config) AttnTemp(pos int32) float32 {
	q := float32(math.Floor(float64(float32(pos) / float32(c.AttnTempFloor))))
	p := float64(math.Log(float64(q)+1) * float64(float32(c.AttnTempScale))) // rounded: no FMA
	return float32(p + 1)
}

// readGemma3 reads Gemma 3's conventions as llama.cpp does
// (src/models/gemma3.cpp): a sliding window when the key is set, every
// 6th layer global unless the pattern says otherwise, RoPE base 10000 on
// the window layers, queries scaled by 1/√HeadDim (1/√(Dim/Heads) for the
// 62-layer 27B). A final logit soft cap is refused: llama.cpp's Gemma 3
// files have none.
func readGemma3(c *Config, f *gguf.File) error {
	k := func(s string) string { return c.Arch + "." + s }
	c.EmbedScale, c.PostNorms, c.GELU = true, true, true
	c.Eps = f.Float(k("attention.layer_norm_rms_epsilon"), 1e-6)
	if err := readSWA(c, f, 6, false); err != nil {
		return err
	}
	c.RopeBaseSWA, c.RopeScaleSWA = f.Float(k("rope.freq_base_swa"), 10000), 1
	if v := f.Float(k("final_logit_softcapping"), 0); v != 0 {
		return fmt.Errorf("%s model: %s = %v is not supported", c.Arch, k("final_logit_softcapping"), v)
	}
	return nil
}

// readSWA reads the sliding window and which layers use it: all but every
// pattern-th (the default when the file does not say). required: llama.cpp
// refuses the file without a window.
func readSWA(c *Config, f *gguf.File, pattern int, required bool) error {
	k := func(s string) string { return c.Arch + "." + s }
	w, ok := f.Get(k("attention.sliding_window"))
	if !ok && required {
		return fmt.Errorf("%s model: no %s", c.Arch, k("attention.sliding_window"))
	}
	c.SlidingWindow = int(f.Uint(k("attention.sliding_window"), 0))
	if c.SlidingWindow < 0 || c.SlidingWindow > 1<<20 || ok && required && c.SlidingWindow == 0 {
		return fmt.Errorf("%s model: %s = %v", c.Arch, k("attention.sliding_window"), w)
	}
	c.SWAPattern = pattern
	if v, ok := f.Get(k("attention.sliding_window_pattern")); ok {
		n, isUint := v.(uint32)
		if !isUint || n == 0 || n > 1024 {
			return fmt.Errorf("%s model: %s = %v: want a layer count 1..1024 (per-layer arrays are not supported)", c.Arch, k("attention.sliding_window_pattern"), v)
		}
		c.SWAPattern = int(n)
	}
	return nil
}

// readGPTOSS reads gpt-oss's conventions as llama.cpp does
// (src/models/openai-moe.cpp): a mixture of experts weighted by a softmax
// over the chosen ones only, a sliding window on every other layer (the
// even ones) with the global layers' RoPE base and scale unless
// rope.freq_base_swa says otherwise. An expert weight scale other than 1
// is refused: gpt-oss has none.
func readGPTOSS(c *Config, f *gguf.File) error {
	k := func(s string) string { return c.Arch + "." + s }
	if err := readExperts(c, f, false); err != nil {
		return err
	}
	c.ExpertNormTopK = false
	c.ExpertSoftmaxTopK, c.OAISwiGLU, c.AttnSinks, c.OutBias, c.ExpertBiases = true, true, true, true, true
	if err := readSWA(c, f, 2, true); err != nil {
		return err
	}
	c.RopeBaseSWA, c.RopeScaleSWA = f.Float(k("rope.freq_base_swa"), c.RopeBase), c.RopeScale
	if v := f.Float(k("expert_weights_scale"), 0); v != 0 && v != 1 {
		return fmt.Errorf("%s model: %s = %v is not supported", c.Arch, k("expert_weights_scale"), v)
	}
	return nil
}

// readDeepSeek2 reads deepseek2's multi-head latent attention and experts
// as llama.cpp does (src/models/deepseek2.cpp), for the files its
// converter writes since MLA was split into attn_k_b and attn_v_b (older
// ones, with attn_kv_b, are refused: convert them again). The attention
// scale follows llama.cpp's YaRN pre-scaling, in float32.
func readDeepSeek2(c *Config, f *gguf.File) error {
	k := func(s string) string { return c.Arch + "." + s }
	fail := func(key string, v any, want string) error {
		return fmt.Errorf("%s model: %s = %v, want %s", c.Arch, k(key), v, want)
	}
	c.MLA = true
	c.QLoraRank = int(f.Uint(k("attention.q_lora_rank"), 0))
	c.KVLoraRank = int(f.Uint(k("attention.kv_lora_rank"), 0))
	c.RopeDim = int(f.Uint(k("rope.dimension_count"), 0))
	c.KeyDimMLA = int(f.Uint(k("attention.key_length_mla"), 0))
	c.ValueDimMLA = int(f.Uint(k("attention.value_length_mla"), 0))
	c.ValueDim = int(f.Uint(k("attention.value_length"), 0))
	switch {
	case c.KeyDimMLA == 0 || c.ValueDimMLA == 0:
		return fmt.Errorf("%s model without %s and %s: a conversion from before MLA was split (attn_kv_b); convert it again with a current llama.cpp", c.Arch, k("attention.key_length_mla"), k("attention.value_length_mla"))
	case c.KVHeads != 1:
		return fail("attention.head_count_kv", c.KVHeads, "1 (MLA runs as one latent kv head)")
	case c.KVLoraRank <= 0 || c.KVLoraRank > 8192:
		return fail("attention.kv_lora_rank", c.KVLoraRank, "1..8192")
	case c.QLoraRank < 0 || c.QLoraRank > 65536:
		return fail("attention.q_lora_rank", c.QLoraRank, "0..65536")
	case c.RopeDim <= 0 || c.RopeDim%2 != 0 || c.RopeDim >= c.KeyDimMLA:
		return fail("rope.dimension_count", c.RopeDim, fmt.Sprintf("an even size under the key length %d", c.KeyDimMLA))
	case c.KeyDimMLA > 1024 || c.ValueDimMLA > 1024:
		return fail("attention.key_length_mla", c.KeyDimMLA, "at most 1024 (and value_length_mla too)")
	case c.HeadDim != c.KVLoraRank+c.RopeDim:
		return fail("attention.key_length", c.HeadDim, fmt.Sprintf("kv_lora_rank + rope.dimension_count = %d", c.KVLoraRank+c.RopeDim))
	case c.ValueDim != c.KVLoraRank:
		return fail("attention.value_length", c.ValueDim, fmt.Sprintf("kv_lora_rank = %d", c.KVLoraRank))
	}
	if v := f.Float(k("attention.temperature_scale"), 0); v != 0 {
		return fail("attention.temperature_scale", v, "none (Mistral Large 3's temperature is not supported yet)")
	}
	// Unset gating is DeepSeek V2's softmax.
	if err := readSharedExperts(c, f, false); err != nil {
		return err
	}
	// llama.cpp's kq_scale: YaRN's magnitude taken out of the rope
	// (attn_factor_org) and, with the log multiplier, squared into the
	// softmax's scale over √KeyDimMLA.
	logMul := float32(f.Float(k("rope.scaling.yarn_log_multiplier"), 0)) / 0.1
	attn, fs := float32(1), 1/float32(c.RopeScale)
	if c.YaRN {
		attn = float32(c.YaRNAttnFactor)
	}
	ln := float32(math.Log(float64(1 / fs)))
	org := attn * (float32(0.1*ln) + 1)
	ms := org * (float32(float32(0.1*logMul)*ln) + 1)
	c.KQScale = float64(ms * ms / float32(math.Sqrt(float64(c.KeyDimMLA))))
	return nil
}

// readSharedExperts reads deepseek2's and glm4moe's mixture of experts as
// llama.cpp does: leading dense blocks, shared experts beside the routed
// ones, the gating function (when unset: a sigmoid if sigmoid is true,
// llama.cpp's default for glm4moe, else a softmax), the chosen weights'
// renormalisation and scale, and expert groups (which llama.cpp reads for
// every architecture).
func readSharedExperts(c *Config, f *gguf.File, sigmoid bool) error {
	k := func(s string) string { return c.Arch + "." + s }
	fail := func(key string, v any, want string) error {
		return fmt.Errorf("%s model: %s = %v, want %s", c.Arch, k(key), v, want)
	}
	if err := readExperts(c, f, true); err != nil {
		return err
	}
	c.LeadDense = int(f.Uint(k("leading_dense_block_count"), 0))
	c.SharedExperts = int(f.Uint(k("expert_shared_count"), 0))
	c.ExpertNormTopK = f.Bool(k("expert_weights_norm"), false)
	c.ExpertWeightsScale = float64(float32(f.Float(k("expert_weights_scale"), 0)))
	c.ExpertGroups = int(f.Uint(k("expert_group_count"), 0))
	c.ExpertGroupsUsed = int(f.Uint(k("expert_group_used_count"), 0))
	switch gating := f.Uint(k("expert_gating_func"), 0); gating {
	case 0:
		c.ExpertSigmoid = sigmoid
	case 1: // softmax
	case 2:
		c.ExpertSigmoid = true
	default:
		return fail("expert_gating_func", gating, "1 (softmax) or 2 (sigmoid)")
	}
	switch {
	case c.LeadDense < 0 || c.LeadDense > c.Layers:
		return fail("leading_dense_block_count", c.LeadDense, fmt.Sprintf("0..%d", c.Layers))
	case c.SharedExperts < 0 || c.SharedExperts > 64:
		return fail("expert_shared_count", c.SharedExperts, "0..64")
	case c.ExpertGroups > 1 && (c.Experts%c.ExpertGroups != 0 || c.ExpertGroupsUsed < 1 || c.ExpertGroupsUsed > c.ExpertGroups ||
		c.Experts/c.ExpertGroups < 2 || c.ExpertsUsed > c.ExpertGroupsUsed*(c.Experts/c.ExpertGroups)):
		return fail("expert_group_count", c.ExpertGroups, fmt.Sprintf("a divisor of the %d experts, groups of ≥ 2, with expert_group_used_count groups holding the %d chosen", c.Experts, c.ExpertsUsed))
	}
	return nil
}

// readGLM4MoE reads glm4moe's conventions as llama.cpp does
// (src/models/glm4-moe.cpp): a trunk of block_count − nextn_predict_layers
// blocks (the MTP blocks after it are not computed: see Config.NextN),
// NeoX RoPE over the first rope.dimension_count dims of each head (GLM-4.5:
// 64 of 128), and deepseek2's mixture of experts, sigmoid-gated unless the
// file says otherwise; expert_shared_count is required, as there. Its
// multimodal variant (rope.dimension_sections, M-RoPE) is refused.
func readGLM4MoE(c *Config, f *gguf.File) error {
	k := func(s string) string { return c.Arch + "." + s }
	fail := func(key string, v any, want string) error {
		return fmt.Errorf("%s model: %s = %v, want %s", c.Arch, k(key), v, want)
	}
	c.NextN = int(f.Uint(k("nextn_predict_layers"), 0))
	if c.NextN < 0 || c.NextN >= c.Layers {
		return fail("nextn_predict_layers", c.NextN, fmt.Sprintf("0..%d, fewer than block_count", c.Layers-1))
	}
	c.Layers -= c.NextN
	c.RopeDim = int(f.Uint(k("rope.dimension_count"), uint64(c.HeadDim)))
	if c.RopeDim < 2 || c.RopeDim%2 != 0 || c.RopeDim > c.HeadDim {
		return fail("rope.dimension_count", c.RopeDim, fmt.Sprintf("an even size up to the head size %d", c.HeadDim))
	}
	if v, ok := f.Get(k("rope.dimension_sections")); ok {
		return fail("rope.dimension_sections", v, "none (GLM-4.5V's M-RoPE is not supported)")
	}
	if _, ok := f.Get(k("expert_shared_count")); !ok {
		return fmt.Errorf("%s model: no %s (llama.cpp requires it)", c.Arch, k("expert_shared_count"))
	}
	return readSharedExperts(c, f, true)
}

// readExperts reads a mixture-of-experts block's shape. As in llama.cpp
// the expert size defaults to feed_forward_length / expert_used_count,
// and qwen3moe always renormalises the chosen experts' weights.
func readExperts(c *Config, f *gguf.File, shared bool) error {
	k := func(s string) string { return c.Arch + "." + s }
	c.Experts = int(f.Uint(k("expert_count"), 0))
	c.ExpertsUsed = int(f.Uint(k("expert_used_count"), 0))
	if c.Experts <= 0 || c.Experts > 1024 {
		return fmt.Errorf("%s model: %s = %d, want 1..1024", c.Arch, k("expert_count"), c.Experts)
	}
	if c.ExpertsUsed <= 0 || c.ExpertsUsed > c.Experts {
		return fmt.Errorf("%s model: %s = %d, want 1..%s (%d)", c.Arch, k("expert_used_count"), c.ExpertsUsed, k("expert_count"), c.Experts)
	}
	c.ExpertFFDim = int(f.Uint(k("expert_feed_forward_length"), uint64(c.FFDim/c.ExpertsUsed)))
	if c.ExpertFFDim <= 0 {
		return fmt.Errorf("%s model: %s = %d, want > 0", c.Arch, k("expert_feed_forward_length"), c.ExpertFFDim)
	}
	if c.FFDim == 0 {
		c.FFDim = c.ExpertFFDim * c.ExpertsUsed
	}
	if n := f.Uint(k("expert_shared_count"), 0); n != 0 && !shared {
		return fmt.Errorf("%s model: %s = %d: shared experts are not supported for %s", c.Arch, k("expert_shared_count"), n, c.Arch)
	}
	c.ExpertNormTopK = true
	return nil
}
