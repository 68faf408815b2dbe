// Package model describes decoder-only transformer models stored as GGUF:
// their shape from the metadata, and a generator of random-weight models
// for tests. Their tokenizer and chat template are engine/tokenizer's;
// where users keep them, engine/modelstore's; how they are cut for ranks,
// engine/split's.
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
// phi3 (fused QKV and gate-up projections), gpt-oss (attention sinks,
// biases, sliding-window layers alternating with global ones, and a
// mixture of experts with its own clamped SwiGLU, shipped in MXFP4) and
// deepseek2 (DeepSeek V2/V3, Kimi K2: multi-head latent attention and a
// mixture of routed and shared experts) and glm4moe (GLM-4.5 to 4.7:
// grouped-query attention with partial rotary embeddings and deepseek2's
// mixture of routed and shared experts).
var Supported = []string{"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "gpt-oss", "mistral3", "deepseek2", "glm4moe"}

// ErrUnsupported is wrapped by the error for any other architecture.
var ErrUnsupported = errors.New("unsupported architecture")

// notYet names what keeps the newest families people ask for from running,
// so that their refusal says more than "unsupported" (issue 49; the plan
// behind each reason: docs/inference.md#model-families).
var notYet = map[string]string{
	"qwen3next": "its gated delta-net layers keep a recurrent state (a convolution window and a matrix per head) that Orrery's runner does not hold yet",
	"qwen35":    "its gated delta-net layers keep a recurrent state (a convolution window and a matrix per head) that Orrery's runner does not hold yet",
	"qwen35moe": "its gated delta-net layers keep a recurrent state (a convolution window and a matrix per head) that Orrery's runner does not hold yet",
	"gemma4":    "Gemma 4's per-layer head sizes, layers sharing an earlier layer's KV cache and per-layer token inputs are not built yet",
	"deepseek4": "DeepSeek V4's compressed KV cache (per-layer compressor state, a lightning indexer choosing compressed blocks) and hyper-connections are not built; the pinned ggml has every op they need, or llama.cpp's composition of it",
}

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
	// deepseek2's multi-head latent attention (MLA), as llama.cpp runs it
	// with the absorption optimisation: queries through a rank-QLoraRank
	// projection (0: one attn_q); keys and values through one latent of
	// KVLoraRank per token, which the cache holds with the RopeDim rotary
	// key part as one kv head (HeadDim = KVLoraRank + RopeDim, ValueDim =
	// KVLoraRank); per head, attn_k_b folds the queries' non-rotary
	// KeyDimMLA − RopeDim part into the latent, attn_v_b expands the
	// attended latent to ValueDimMLA. KQScale replaces 1/√HeadDim in the
	// softmax.
	//
	// RopeDim is also glm4moe's partial rotary embedding: only the first
	// RopeDim of each head's HeadDim dimensions rotate (see RotaryDims).
	MLA         bool    `json:"mla,omitempty"`
	QLoraRank   int     `json:"qLoraRank,omitempty"`
	KVLoraRank  int     `json:"kvLoraRank,omitempty"`
	RopeDim     int     `json:"ropeDim,omitempty"`
	KeyDimMLA   int     `json:"keyDimMla,omitempty"`
	ValueDimMLA int     `json:"valueDimMla,omitempty"`
	ValueDim    int     `json:"valueDim,omitempty"`
	KQScale     float64 `json:"kqScale,omitempty"`
	// deepseek2's and glm4moe's experts: the first LeadDense blocks have a
	// dense MLP; the others SharedExperts × ExpertFFDim of shared SwiGLU
	// beside the routed experts, which are scored by a sigmoid
	// (ExpertSigmoid) or softmax, chosen with a per-expert bias added
	// (ExpertProbsBias, exp_probs_b) among the best ExpertGroupsUsed of
	// ExpertGroups groups (each group scored by its best two), and weighted
	// by their scores (renormalised when ExpertNormTopK) times
	// ExpertWeightsScale.
	LeadDense          int     `json:"leadDense,omitempty"`
	SharedExperts      int     `json:"sharedExperts,omitempty"`
	ExpertSigmoid      bool    `json:"expertSigmoid,omitempty"`
	ExpertProbsBias    bool    `json:"expertProbsBias,omitempty"`
	ExpertWeightsScale float64 `json:"expertWeightsScale,omitempty"`
	ExpertGroups       int     `json:"expertGroups,omitempty"`
	ExpertGroupsUsed   int     `json:"expertGroupsUsed,omitempty"`
	// NextN is glm4moe's multi-token-prediction (MTP) blocks: the file's
	// block_count counts them after the Layers blocks of the trunk, as
	// blk.Layers… holding nextn.* tensors. As llama.cpp without its MTP
	// drafter, Orrery neither checks nor computes them, and shards and
	// tensor-parallel slices leave them out; a whole file's loader (ollama's
	// ggml backend) still reads them into memory.
	NextN int `json:"nextN,omitempty"`
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
	// TP is the tensor-parallel slice a slice file holds (nil: whole
	// blocks); Heads, KVHeads and FFDim are then the slice's.
	TP *TPSlice `json:"tp,omitempty"`
	// Pooling makes the model an embedding model (pooling.go); empty for
	// a chat model.
	Pooling Pooling `json:"pooling,omitempty"`
}

// IsSWA reports whether block il attends to a sliding window (Gemma 3:
// all but every SWAPattern-th block, llama.cpp's rule).
func (c Config) IsSWA(il int) bool {
	return c.SlidingWindow > 0 && (c.SWAPattern == 0 || il%c.SWAPattern < c.SWAPattern-1)
}

// KVTokens is the positions block il's KV cache holds, as ollama's caches
// size them (engine/backend/ggml): a context of ctxLen tokens shared by
// parallel slots for a global block; for a sliding-window one a window per
// slot and a batch of batch tokens (ollama keeps positions p-w..p: it is
// passed window-1, as the backend does), at most the whole context per
// slot.
func (c Config) KVTokens(il, ctxLen, parallel, batch int) int {
	if !c.IsSWA(il) {
		return ctxLen
	}
	parallel = max(parallel, 1)
	mem := c.SlidingWindow - 1
	if parallel > 1 {
		mem++
	}
	if mem >= ctxLen {
		return parallel * ctxLen
	}
	return parallel*mem + batch
}

// KVBytes is block il's KV cache in bytes, for elem bytes a value (2 for
// f16).
func (c Config) KVBytes(il, ctxLen, parallel, batch, elem int) uint64 {
	return uint64(c.KVTokens(il, ctxLen, parallel, batch)) * uint64(c.KVWidth()) * uint64(elem)
}

// KVWidth is the values a block's KV cache holds per token: keys and
// values of every kv head.
func (c Config) KVWidth() int {
	return c.KVHeads * (c.HeadDim + cmp.Or(c.ValueDim, c.HeadDim))
}

// IsMoE reports whether block il's MLP is a mixture of experts.
func (c Config) IsMoE(il int) bool { return c.Experts > 0 && il >= c.LeadDense }

// FFNNorm is the name of a block's norm before the MLP, without the
// "blk.N." prefix: post_attention_norm.weight in gpt-oss's and glm4moe's
// files.
func (c Config) FFNNorm() string {
	if c.Arch == "gpt-oss" || c.Arch == "glm4moe" {
		return "post_attention_norm.weight"
	}
	return "ffn_norm.weight"
}

// RotaryDims is how many of each head's first dimensions RoPE rotates
// in standard attention: RopeDim when set (glm4moe's partial rotary),
// else the whole head.
func (c Config) RotaryDims() int { return cmp.Or(c.RopeDim, c.HeadDim) }

// FileBlocks is the block count the file's metadata states: the trunk's
// Layers and the NextN blocks after them (ollama's loader indexes the
// output head's layer after all of them).
func (c Config) FileBlocks() int { return c.Layers + c.NextN }

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
	if err := readTP(&c, f); err != nil {
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
	if err := checkBlocks(c, f, first, last, want); err != nil {
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
		if why, ok := notYet[arch]; ok {
			return Config{}, fmt.Errorf("%w %q, not yet: %s; supported: %s", ErrUnsupported, arch, why, strings.Join(Supported, ", "))
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
		RopeNeoX:   arch != "llama" && arch != "mistral3" && arch != "deepseek2",
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
		if err := readExperts(&c, f, false); err != nil {
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
	if err := readValuesAndRotary(&c, f); err != nil {
		return Config{}, err
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
	if err := readPooling(&c, f); err != nil {
		return Config{}, err
	}
	return c, nil
}

// readValuesAndRotary reads the value size and the rotary part of a head,
// which equal the key size but for deepseek2's latent attention and
// glm4moe's partial rotary (their readers read the rest of the family's
// conventions too).
func readValuesAndRotary(c *Config, f *gguf.File) error {
	k := func(s string) string { return c.Arch + "." + s }
	vl, rd := f.Uint(k("attention.value_length"), uint64(c.HeadDim)), f.Uint(k("rope.dimension_count"), uint64(c.HeadDim))
	switch {
	case c.Arch == "deepseek2":
		return readDeepSeek2(c, f)
	case int(vl) != c.HeadDim:
		return fmt.Errorf("%s model: %s = %d differs from the key length %d, which Orrery does not support", c.Arch, k("attention.value_length"), vl, c.HeadDim)
	case c.Arch == "glm4moe":
		return readGLM4MoE(c, f)
	case int(rd) != c.HeadDim:
		return fmt.Errorf("%s model: %s = %d: partial rotary embeddings (%d of %d dims) are supported for glm4moe only", c.Arch, k("rope.dimension_count"), rd, rd, c.HeadDim)
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
