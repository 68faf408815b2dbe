// Package model describes decoder-only transformer models stored as GGUF:
// their shape from the metadata, their tokenizer and chat template, where
// users keep them, and a generator of random-weight models for tests.
package model

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// Supported lists the architectures the runner implements: llama (Llama
// 1–3.x, and Mistral 7B-style models, which llama.cpp converts as llama),
// mistral3 (Ministral 3: llama with YaRN and a per-position attention
// temperature), qwen2, qwen3
// (per-head q/k RMSNorm), qwen3moe (qwen3 attention, a routed mixture of
// experts in every block), gemma3 (scaled embeddings, norms after
// attention and MLP too, GELU, sliding-window layers between global ones)
// phi3 (fused QKV and gate-up projections) and gpt-oss (attention sinks,
// biases, sliding-window layers alternating with global ones, and a
// mixture of experts with its own clamped SwiGLU, shipped in MXFP4).
var Supported = []string{"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "gpt-oss", "mistral3"}

// ErrUnsupported is wrapped by the error for any other architecture.
var ErrUnsupported = errors.New("unsupported architecture")

// SupportedTypes are the tensor types a model may hold: those ggml's CPU
// and Metal backends both compute. A tensor of
// any other type makes the model refused at load, naming both.
var SupportedTypes = []gguf.TensorType{
	gguf.F32, gguf.F16, gguf.BF16, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q8_0,
	gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.IQ4_NL, gguf.IQ4_XS,
	gguf.MXFP4,
}

// fileTypeNames are llama.cpp's names for general.file_type (LLAMA_FTYPE
// without the MOSTLY_ prefix): the mix llama-quantize was asked for.
var fileTypeNames = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
	12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
	19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
	26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
	36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}

// TypeShare is one tensor type's part of a model's weights.
type TypeShare struct {
	Type    string `json:"type"`
	Tensors int    `json:"tensors"`
	Bytes   uint64 `json:"bytes"`
}

// Config is a model's shape and hyperparameters.
type Config struct {
	Arch       string  `json:"arch"`
	Name       string  `json:"name,omitempty"`
	Layers     int     `json:"layers"`
	Dim        int     `json:"dim"`
	FFDim      int     `json:"ffDim"`
	Heads      int     `json:"heads"`
	KVHeads    int     `json:"kvHeads"`
	HeadDim    int     `json:"headDim"`
	Vocab      int     `json:"vocab"`
	ContextLen int     `json:"contextLength"`
	RopeBase   float64 `json:"ropeBase"`
	RopeScale  float64 `json:"ropeScale"`
	Eps        float64 `json:"eps"`
	// RopeNeoX rotates the two halves of a head (qwen2) instead of
	// adjacent pairs (llama).
	RopeNeoX bool `json:"ropeNeoX"`
	// QKVBias: the q, k and v projections have biases (qwen2).
	QKVBias bool `json:"qkvBias"`
	// TiedOutput: no output.weight; the embedding matrix is reused.
	TiedOutput bool `json:"tiedOutput"`
	// QKNorm: each head's q and k are RMS-normalised before RoPE
	// (attn_q_norm, attn_k_norm; qwen3).
	QKNorm bool `json:"qkNorm,omitempty"`
	// RopeFreqs: the file has rope_freqs.weight, per-dimension divisors of
	// the RoPE frequencies (Llama 3.x's long-context scaling).
	RopeFreqs bool `json:"ropeFreqs,omitempty"`
	// Experts > 0 makes every block's MLP a mixture of experts: a router
	// (ffn_gate_inp) picks ExpertsUsed of Experts SwiGLU experts of
	// ExpertFFDim per token (ffn_{gate,up,down}_exps), whose outputs are
	// summed weighted by the router's softmax, renormalised over the
	// chosen ones when ExpertNormTopK.
	Experts        int  `json:"experts,omitempty"`
	ExpertsUsed    int  `json:"expertsUsed,omitempty"`
	ExpertFFDim    int  `json:"expertFfDim,omitempty"`
	ExpertNormTopK bool `json:"expertNormTopK,omitempty"`
	// Gemma 3: embeddings scaled by √Dim; an RMSNorm after attention
	// (post_attention_norm) and after the MLP (post_ffw_norm) too; GELU
	// instead of SiLU in the gated MLP; queries scaled by QueryScale before
	// attention (instead of 1/√HeadDim inside it); and every SWAPattern-th
	// layer global, the others attending to the last SlidingWindow
	// positions with RoPE base RopeBaseSWA (and no scaling).
	EmbedScale    bool    `json:"embedScale,omitempty"`
	PostNorms     bool    `json:"postNorms,omitempty"`
	GELU          bool    `json:"gelu,omitempty"`
	QueryScale    float64 `json:"queryScale,omitempty"`
	SlidingWindow int     `json:"slidingWindow,omitempty"`
	SWAPattern    int     `json:"swaPattern,omitempty"`
	RopeBaseSWA   float64 `json:"ropeBaseSwa,omitempty"`
	// YaRN RoPE scaling (rope.scaling.type yarn, factor RopeScale):
	// ggml's rope with extrapolation factor 1, the original context
	// YaRNOrigCtx, betas YaRNBetaFast and YaRNBetaSlow, and attention
	// factor YaRNAttnFactor (see readYaRN).
	YaRN           bool    `json:"yarn,omitempty"`
	YaRNOrigCtx    int     `json:"yarnOrigCtx,omitempty"`
	YaRNBetaFast   float64 `json:"yarnBetaFast,omitempty"`
	YaRNBetaSlow   float64 `json:"yarnBetaSlow,omitempty"`
	YaRNAttnFactor float64 `json:"yarnAttnFactor,omitempty"`
	// RopeScaleSWA is the RoPE scale of the sliding-window layers: 1 for
	// Gemma 3, RopeScale for gpt-oss.
	RopeScaleSWA float64 `json:"ropeScaleSwa,omitempty"`
	// gpt-oss: a learned per-head logit (attn_sinks) in every attention
	// softmax, which takes probability but contributes no value; a bias
	// on the attention output, on the router and on every expert; the
	// softmax taken over the chosen experts' router logits only
	// (ExpertSoftmaxTopK); OpenAI's SwiGLU, gate·σ(1.702·gate)·(up+1) with
	// the gate clamped to ≤ 7 and up to ±7 (OAISwiGLU); and the MLP's
	// norm named post_attention_norm.
	AttnSinks         bool `json:"attnSinks,omitempty"`
	OutBias           bool `json:"outBias,omitempty"`
	ExpertBiases      bool `json:"expertBiases,omitempty"`
	ExpertSoftmaxTopK bool `json:"expertSoftmaxTopK,omitempty"`
	OAISwiGLU         bool `json:"oaiSwiglu,omitempty"`
	// AttnTempScale ≠ 0 (Ministral 3, as Llama 4): queries are scaled,
	// after RoPE, by 1 + AttnTempScale·ln(⌊pos / AttnTempFloor⌋ + 1), so
	// that attention stays sharp at long contexts.
	AttnTempScale float64 `json:"attnTempScale,omitempty"`
	AttnTempFloor int     `json:"attnTempFloor,omitempty"`
	// Phi-3: one attn_qkv matrix instead of q, k and v (FusedQKV), and one
	// ffn_up of 2·FFDim rows, gate then up, instead of ffn_gate and ffn_up
	// (FusedGateUp).
	FusedQKV    bool `json:"fusedQkv,omitempty"`
	FusedGateUp bool `json:"fusedGateUp,omitempty"`
	// FileType is the file's quantization: llama.cpp's name for its
	// general.file_type (e.g. "Q4_K_M"), else the type holding the most
	// weights (e.g. "Q8_0").
	FileType string `json:"quantization"`
	// Types is the type mix, most bytes first.
	Types []TypeShare `json:"types,omitempty"`
	// Params is the number of weights (in this file: a shard holds part).
	Params uint64 `json:"params"`
	// ShardFirst and ShardLast are the blocks [first, last) a shard holds;
	// both 0 for a whole model.
	ShardFirst int `json:"shardFirst,omitempty"`
	ShardLast  int `json:"shardLast,omitempty"`
}

// IsSWA reports whether block il attends to a sliding window (Gemma 3:
// all but every SWAPattern-th block, llama.cpp's rule).
func (c Config) IsSWA(il int) bool {
	return c.SlidingWindow > 0 && (c.SWAPattern == 0 || il%c.SWAPattern < c.SWAPattern-1)
}

// FFNNorm is the name of a block's norm before the MLP, without the
// "blk.N." prefix: post_attention_norm.weight in gpt-oss's files.
func (c Config) FFNNorm() string {
	if c.Arch == "gpt-oss" {
		return "post_attention_norm.weight"
	}
	return "ffn_norm.weight"
}

// Blocks is the range of blocks the file holds: [ShardFirst, ShardLast),
// or all of them.
func (c Config) Blocks() (first, last int) {
	if c.ShardLast == 0 {
		return 0, c.Layers
	}
	return c.ShardFirst, c.ShardLast
}

// FromGGUF reads a model's config from its metadata and checks that the
// tensors a forward pass needs are there with the right shapes.
func FromGGUF(f *gguf.File) (Config, error) {
	c, err := readHyperparams(f)
	if err != nil {
		return Config{}, err
	}
	first, last, err := readShard(&c, f)
	if err != nil {
		return Config{}, err
	}
	if err := checkEmbeddings(&c, f, first, last); err != nil {
		return Config{}, err
	}
	want, err := blockShapes(&c, f, first)
	if err != nil {
		return Config{}, err
	}
	if err := tallyTypes(&c, f); err != nil {
		return Config{}, err
	}
	if err := checkBlocks(f, first, last, want); err != nil {
		return Config{}, err
	}
	return c, nil
}

// readHyperparams reads the architecture's hyperparameters and checks that
// they are consistent and within what Orrery computes; anything else is
// refused with an error naming the key.
func readHyperparams(f *gguf.File) (Config, error) {
	arch := f.String("general.architecture", "")
	if !slices.Contains(Supported, arch) {
		if arch == "" {
			arch = "(none)"
		}
		return Config{}, fmt.Errorf("%w %q; supported: %s", ErrUnsupported, arch, strings.Join(Supported, ", "))
	}
	k := func(s string) string { return arch + "." + s }
	c := Config{
		Arch:       arch,
		Name:       f.String("general.name", ""),
		Layers:     int(f.Uint(k("block_count"), 0)),
		Dim:        int(f.Uint(k("embedding_length"), 0)),
		FFDim:      int(f.Uint(k("feed_forward_length"), 0)),
		Heads:      int(f.Uint(k("attention.head_count"), 0)),
		ContextLen: int(f.Uint(k("context_length"), 2048)),
		RopeBase:   f.Float(k("rope.freq_base"), 10000),
		Eps:        f.Float(k("attention.layer_norm_rms_epsilon"), 1e-5),
		RopeNeoX:   arch != "llama" && arch != "mistral3",
		QKNorm:     arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3",
	}
	var err error
	if c.RopeScale, err = ropeScale(f, arch); err != nil {
		return Config{}, err
	}
	if err := readYaRN(&c, f); err != nil {
		return Config{}, err
	}
	if arch == "mistral3" {
		if err := readMistral3(&c, f); err != nil {
			return Config{}, err
		}
	}
	c.KVHeads = int(f.Uint(k("attention.head_count_kv"), uint64(c.Heads)))
	if arch == "qwen3moe" {
		if err := readExperts(&c, f); err != nil {
			return Config{}, err
		}
	}
	if arch == "gpt-oss" {
		if err := readGPTOSS(&c, f); err != nil {
			return Config{}, err
		}
	}
	if arch == "gemma3" {
		if err := readGemma3(&c, f); err != nil {
			return Config{}, err
		}
	}
	if arch == "phi3" {
		// As llama.cpp: Phi-3's sliding window is ignored (its converted
		// files state it wrongly), queries are pre-scaled.
		c.FusedGateUp = true
	}
	if c.Layers <= 0 || c.Dim <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.FFDim <= 0 {
		return Config{}, fmt.Errorf("%s model: block_count %d, embedding_length %d, feed_forward_length %d, head_count %d, head_count_kv %d: all must be > 0",
			arch, c.Layers, c.Dim, c.FFDim, c.Heads, c.KVHeads)
	}
	if c.Heads%c.KVHeads != 0 {
		return Config{}, fmt.Errorf("%s model: %d kv heads do not divide %d heads", arch, c.KVHeads, c.Heads)
	}
	// Qwen3 sets the head size apart from dim/heads (e.g. 128 with dim
	// 1024 and 16 heads); without the key it must divide evenly.
	hd, ok := f.Get(k("attention.key_length"))
	if !ok && c.Dim%c.Heads != 0 {
		return Config{}, fmt.Errorf("%s model: %d heads do not divide dim %d and %s is not set", arch, c.Heads, c.Dim, k("attention.key_length"))
	}
	c.HeadDim = int(f.Uint(k("attention.key_length"), uint64(c.Dim/max(c.Heads, 1))))
	if ok && (c.HeadDim <= 0 || c.HeadDim%2 != 0 || c.HeadDim > 1024) {
		return Config{}, fmt.Errorf("%s model: %s = %v, want an even size up to 1024", arch, k("attention.key_length"), hd)
	}
	if vl := f.Uint(k("attention.value_length"), uint64(c.HeadDim)); int(vl) != c.HeadDim {
		return Config{}, fmt.Errorf("%s model: %s = %d differs from the key length %d, which Orrery does not support", arch, k("attention.value_length"), vl, c.HeadDim)
	}
	if rd := f.Uint(k("rope.dimension_count"), uint64(c.HeadDim)); int(rd) != c.HeadDim {
		return Config{}, fmt.Errorf("%s model: %s = %d: partial rotary embeddings (%d of %d dims) are not supported", arch, k("rope.dimension_count"), rd, rd, c.HeadDim)
	}
	if tokens := f.Strings("tokenizer.ggml.tokens"); len(tokens) > 0 {
		c.Vocab = len(tokens)
	}
	if arch == "gemma3" || arch == "phi3" {
		// Queries are scaled before attention, by 1/√HeadDim (Gemma 3's
		// 62-layer 27B: 1/√(Dim/Heads)), in float32 as llama.cpp computes
		// it: ggml_scale takes a float.
		d := c.HeadDim
		if arch == "gemma3" && c.Layers == 62 {
			d = c.Dim / c.Heads
		}
		c.QueryScale = float64(1 / float32(math.Sqrt(float64(d))))
	}
	return c, nil
}

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
		return nil
	}
	logMul := float32(f.Float(k("yarn_log_multiplier"), 0))
	if logMul != 0 && c.Arch != "mistral3" {
		return fmt.Errorf("%s model: %s = %v is not supported", c.Arch, k("yarn_log_multiplier"), logMul)
	}
	c.YaRN = true
	c.YaRNOrigCtx = int(f.Uint(k("original_context_length"), uint64(c.ContextLen)))
	if c.YaRNOrigCtx <= 0 || c.YaRNOrigCtx > 1<<24 {
		return fmt.Errorf("%s model: %s = %d", c.Arch, k("original_context_length"), c.YaRNOrigCtx)
	}
	c.YaRNBetaFast, c.YaRNBetaSlow = f.Float(k("yarn_beta_fast"), 32), f.Float(k("yarn_beta_slow"), 1)
	factor := float32(c.RopeScale)
	attn := float32(1)
	if factor > 1 {
		ln := float32(math.Log(float64(factor)))
		// Conversions keep Go from fusing these into FMAs, which C does not.
		m := float32(0.1*ln) + 1
		if logMul != 0 {
			attn = m / (float32(float32(0.1*logMul)*ln) + 1)
		} else {
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
	if err := readExperts(c, f); err != nil {
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

// readExperts reads a mixture-of-experts block's shape. As in llama.cpp
// the expert size defaults to feed_forward_length / expert_used_count,
// and qwen3moe always renormalises the chosen experts' weights.
func readExperts(c *Config, f *gguf.File) error {
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
	if n := f.Uint(k("expert_shared_count"), 0); n != 0 {
		return fmt.Errorf("%s model: %s = %d: shared experts are not supported for %s", c.Arch, k("expert_shared_count"), n, c.Arch)
	}
	c.ExpertNormTopK = true
	return nil
}

// readShard reads which blocks [first, last) the file holds, and whether the
// output projection is tied to the embeddings.
func readShard(c *Config, f *gguf.File) (first, last int, err error) {
	first, last = 0, c.Layers
	if _, ok := f.Get(KeyShardLast); ok {
		first, last = int(f.Uint(KeyShardFirst, 0)), int(f.Uint(KeyShardLast, 0))
		if first < 0 || last > c.Layers || first >= last {
			return 0, 0, fmt.Errorf("shard of blocks [%d, %d) of a %d-layer model", first, last, c.Layers)
		}
		c.ShardFirst, c.ShardLast = first, last
		c.TiedOutput = f.Bool(KeyShardTied, false)
	} else {
		_, hasOut := f.Tensor("output.weight")
		c.TiedOutput = !hasOut
	}
	return first, last, nil
}

// checkEmbeddings checks the token embeddings (needed by the first shard, and
// by the last when the output is tied) and the output norm (needed by the
// last), and takes the vocabulary size from the embeddings if the tokenizer
// did not give it.
func checkEmbeddings(c *Config, f *gguf.File, first, last int) error {
	needEmb := first == 0 || last == c.Layers && c.TiedOutput
	emb, ok := f.Tensor("token_embd.weight")
	switch {
	case !ok && needEmb:
		return errors.New("no token_embd.weight tensor")
	case ok:
		if len(emb.Dims) != 2 || int(emb.Dims[0]) != c.Dim {
			return fmt.Errorf("token_embd.weight is %v, want [%d, vocab]", emb.Dims, c.Dim)
		}
		if c.Vocab == 0 {
			c.Vocab = int(emb.Dims[1])
		}
		if int(emb.Dims[1]) != c.Vocab {
			return fmt.Errorf("token_embd.weight has %d rows, the tokenizer %d tokens", emb.Dims[1], c.Vocab)
		}
	case c.Vocab == 0:
		return errors.New("no tokenizer.ggml.tokens and no token_embd.weight: vocabulary size unknown")
	}
	if last == c.Layers {
		if _, ok := f.Tensor("output_norm.weight"); !ok {
			return errors.New("no output_norm.weight tensor")
		}
	}
	return nil
}

// blockShapes notes whether the blocks have q/k/v biases and the model
// RoPE frequency factors, and returns the shape each block's tensors must
// have, by name suffix.
func blockShapes(c *Config, f *gguf.File, first int) (map[string][]uint64, error) {
	_, c.QKVBias = f.Tensor(fmt.Sprintf("blk.%d.attn_q.bias", first))
	_, c.FusedQKV = f.Tensor(fmt.Sprintf("blk.%d.attn_qkv.weight", first))
	if c.FusedQKV && c.Arch != "phi3" {
		return nil, fmt.Errorf("%s model with blk.%d.attn_qkv.weight: a fused QKV is supported for phi3 only", c.Arch, first)
	}
	for _, name := range []string{"rope_factors_long.weight", "rope_factors_short.weight"} {
		if _, ok := f.Tensor(name); ok {
			return nil, fmt.Errorf("%s model with %s: LongRoPE (Phi-3's 128k variants) is not supported yet", c.Arch, name)
		}
	}
	if rf, ok := f.Tensor("rope_freqs.weight"); ok {
		if c.Arch != "llama" && c.Arch != "mistral3" {
			return nil, fmt.Errorf("%s model with rope_freqs.weight: RoPE frequency factors are supported for llama and mistral3 only", c.Arch)
		}
		if !slices.Equal(rf.Dims, []uint64{uint64(c.HeadDim / 2)}) || rf.Type != gguf.F32 {
			return nil, fmt.Errorf("rope_freqs.weight is %s %v, want F32 [%d]", rf.Type, rf.Dims, c.HeadDim/2)
		}
		c.RopeFreqs = true
	}
	if c.Arch == "mistral3" {
		// Biases llama.cpp takes optionally: the output's is computed,
		// the MLP's refused (no Ministral 3 has them).
		_, c.OutBias = f.Tensor(fmt.Sprintf("blk.%d.attn_output.bias", first))
		for _, name := range []string{"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"} {
			if _, ok := f.Tensor(fmt.Sprintf("blk.%d.%s", first, name)); ok {
				return nil, fmt.Errorf("%s model with blk.%d.%s: MLP biases are not supported", c.Arch, first, name)
			}
		}
	}
	dim, hd := uint64(c.Dim), uint64(c.HeadDim)
	q, kv := uint64(c.Heads)*hd, uint64(c.KVHeads)*hd
	want := map[string][]uint64{
		"attn_norm.weight": {dim}, c.FFNNorm(): {dim},
		"attn_q.weight": {dim, q}, "attn_k.weight": {dim, kv}, "attn_v.weight": {dim, kv},
		"attn_output.weight": {q, dim},
	}
	if c.FusedQKV {
		delete(want, "attn_q.weight")
		delete(want, "attn_k.weight")
		delete(want, "attn_v.weight")
		want["attn_qkv.weight"] = []uint64{dim, q + 2*kv}
	}
	if c.FusedGateUp {
		ff := uint64(c.FFDim)
		want["ffn_up.weight"], want["ffn_down.weight"] = []uint64{dim, 2 * ff}, []uint64{ff, dim}
	} else if c.Experts > 0 {
		e, eff := uint64(c.Experts), uint64(c.ExpertFFDim)
		want["ffn_gate_inp.weight"] = []uint64{dim, e}
		want["ffn_gate_exps.weight"], want["ffn_up_exps.weight"] = []uint64{dim, eff, e}, []uint64{dim, eff, e}
		want["ffn_down_exps.weight"] = []uint64{eff, dim, e}
	} else {
		ff := uint64(c.FFDim)
		want["ffn_gate.weight"], want["ffn_up.weight"], want["ffn_down.weight"] = []uint64{dim, ff}, []uint64{dim, ff}, []uint64{ff, dim}
	}
	if c.AttnSinks {
		want["attn_sinks.weight"] = []uint64{uint64(c.Heads)}
	}
	if c.OutBias {
		want["attn_output.bias"] = []uint64{dim}
	}
	if c.ExpertBiases {
		e, eff := uint64(c.Experts), uint64(c.ExpertFFDim)
		want["ffn_gate_inp.bias"] = []uint64{e}
		want["ffn_gate_exps.bias"], want["ffn_up_exps.bias"], want["ffn_down_exps.bias"] = []uint64{eff, e}, []uint64{eff, e}, []uint64{dim, e}
	}
	if c.QKNorm {
		want["attn_q_norm.weight"], want["attn_k_norm.weight"] = []uint64{hd}, []uint64{hd}
	}
	if c.PostNorms {
		want["post_attention_norm.weight"], want["post_ffw_norm.weight"] = []uint64{dim}, []uint64{dim}
	}
	if c.QKVBias {
		want["attn_q.bias"], want["attn_k.bias"], want["attn_v.bias"] = []uint64{q}, []uint64{kv}, []uint64{kv}
	}
	return want, nil
}

// tallyTypes checks that every tensor has a type Orrery runs and counts the
// parameters, the type mix and the file type.
func tallyTypes(c *Config, f *gguf.File) error {
	counts := map[gguf.TensorType]uint64{}
	shares := map[gguf.TensorType]*TypeShare{}
	for _, t := range f.Tensors {
		if !slices.Contains(SupportedTypes, t.Type) {
			names := make([]string, len(SupportedTypes))
			for i, st := range SupportedTypes {
				names[i] = st.String()
			}
			return fmt.Errorf("tensor %s has type %s, which Orrery does not run; supported: %s", t.Name, t.Type, strings.Join(names, ", "))
		}
		c.Params += t.Elements()
		counts[t.Type] += t.Elements()
		if shares[t.Type] == nil {
			shares[t.Type] = &TypeShare{Type: t.Type.String()}
		}
		shares[t.Type].Tensors++
		shares[t.Type].Bytes += t.Size
	}
	var best uint64
	for t, n := range counts {
		if n > best || n == best && t.String() < c.FileType {
			best, c.FileType = n, t.String()
		}
	}
	for _, sh := range shares {
		c.Types = append(c.Types, *sh)
	}
	slices.SortFunc(c.Types, func(a, b TypeShare) int {
		if a.Bytes != b.Bytes {
			return cmp.Compare(b.Bytes, a.Bytes)
		}
		return strings.Compare(a.Type, b.Type)
	})
	if name := fileTypeNames[f.Uint("general.file_type", 1<<63)]; name != "" {
		c.FileType = name
	}
	return nil
}

// checkBlocks checks that every block (of the shard) is there with the right
// shapes.
func checkBlocks(f *gguf.File, first, last int, want map[string][]uint64) error {
	for i := first; i < last; i++ {
		for suffix, dims := range want {
			name := fmt.Sprintf("blk.%d.%s", i, suffix)
			t, ok := f.Tensor(name)
			if !ok {
				return fmt.Errorf("no %s tensor", name)
			}
			if !slices.Equal(t.Dims, dims) {
				return fmt.Errorf("%s is %v, want %v", name, t.Dims, dims)
			}
		}
	}
	return nil
}

// TypeMix is a type mix as text, by share of the weights' bytes:
// "Q4_K 71%, Q6_K 27%, F32 <1%".
func TypeMix(types []TypeShare) string {
	var total uint64
	for _, t := range types {
		total += t.Bytes
	}
	parts := make([]string, 0, len(types))
	for _, t := range types {
		pct := float64(t.Bytes) * 100 / float64(max(total, 1))
		if pct < 1 {
			parts = append(parts, t.Type+" <1%")
		} else {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", t.Type, pct))
		}
	}
	return strings.Join(parts, ", ")
}

// String summarises the shape.
func (c Config) String() string {
	ff := fmt.Sprintf("ff %d", c.FFDim)
	if c.Experts > 0 {
		ff = fmt.Sprintf("%d of %d experts of ff %d", c.ExpertsUsed, c.Experts, c.ExpertFFDim)
	}
	return fmt.Sprintf("%s %d layers, dim %d, %s, %d/%d heads, vocab %d, %s", c.Arch, c.Layers, c.Dim, ff, c.Heads, c.KVHeads, c.Vocab, c.FileType)
}
