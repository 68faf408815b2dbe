package model

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// GenOptions is the shape of a generated model.
type GenOptions struct {
	Arch       string // one of Supported
	Layers     int
	Dim        int
	FFDim      int // 0: 8/3 × Dim, rounded up to a multiple of 64
	Heads      int
	KVHeads    int // 0: Heads
	HeadDim    int // 0: Dim / Heads (qwen3 sets it apart)
	Vocab      int
	ContextLen int // 0: 2048
	// RopeBase is rope.freq_base (0: 10000).
	RopeBase float64
	// RopeFreqs writes Llama 3.1's rope_freqs.weight (factor 8, low and
	// high frequency factors 1 and 4, original context 8192); llama only.
	RopeFreqs bool
	// YaRN > 1 writes YaRN RoPE scaling by that factor, from an original
	// context of YaRNOrigCtx (0: the context length), as Qwen3's
	// long-context GGUFs state it (not for gemma3 or phi3).
	YaRN        float64
	YaRNOrigCtx int
	// SlidingWindow > 0 makes layers attend to the last SlidingWindow
	// positions: 5 of every 6 for gemma3, every other one for gpt-oss
	// (which needs it).
	SlidingWindow int
	// Experts > 0 makes every MLP a mixture of Experts experts of
	// ExpertFFDim, ExpertsUsed per token (qwen3moe and gpt-oss, which
	// need them).
	Experts, ExpertsUsed, ExpertFFDim int
	// NextN is glm4moe's multi-token-prediction blocks, written after the
	// Layers of the trunk and counted in block_count, as GLM-4.5's GGUFs
	// hold one (ApplyFamily sets 1; set it to 0 after for none).
	// NoQKNorm leaves out glm4moe's q/k norms, as GLM-4.5-Air has none.
	NextN    int
	NoQKNorm bool
	// Type is the weight type: F32, F16, BF16, Q8_0 or Q4_0 (norms,
	// biases and routers are always F32); or, for a mixture of experts,
	// MXFP4: the experts in MXFP4 and the other matrices in Q8_0, as
	// llama.cpp's MXFP4_MOE and gpt-oss's published GGUFs. Other types
	// come from llama-quantize on a generated file.
	Type string
	Seed uint64
	// ChatTemplate is written instead of ChatMLTemplate when set.
	ChatTemplate string
	// Pooling makes an embedding model: <arch>.pooling_type is written.
	// PoolLast also sets tokenizer.ggml.add_eos_token, as Qwen3-Embedding's
	// GGUFs do, so that the pooled position is EOS.
	Pooling Pooling
}

// Presets are named shapes for gen-model.
var Presets = map[string]GenOptions{
	// tiny: tests (a few MB).
	"tiny": {Arch: "llama", Layers: 4, Dim: 64, FFDim: 192, Heads: 4, KVHeads: 2, Vocab: 512, ContextLen: 512, Type: "F32"},
	// small: the demo and quick benchmarks (~30 MB).
	"small": {Arch: "llama", Layers: 8, Dim: 512, FFDim: 1408, Heads: 8, KVHeads: 4, Vocab: 4096, ContextLen: 2048, Type: "Q8_0"},
	// 1b: the performance reference, 1.1 G weights (1.17 GB in Q8_0).
	"1b": {Arch: "llama", Layers: 16, Dim: 2048, FFDim: 8192, Heads: 32, KVHeads: 8, Vocab: 32000, ContextLen: 4096, Type: "Q8_0"},
}

// Families are gen-model's --arch values: a GGUF architecture with its
// family's conventions. llama3 is llama with Llama 3.x's RoPE (base
// 500000 and rope_freqs); mistral3 has Ministral 3's (base 1e6, YaRN ×16
// over a 16th of the context with a log multiplier of 1) and its attention
// temperature 0.1; qwen3 doubles the head size against dim/heads
// as the Qwen3 models do; qwen3moe adds a mixture of experts whose active
// weights are a small part of the total, as in Qwen3-30B-A3B; gemma3 has
// Gemma 3's tied embeddings, post-norms, GELU and a sliding window of
// 1/8 of the context (at most 512, as Gemma 3's) on 5 of every 6 layers;
// phi3 fuses q, k and v into one matrix and gate and up into another;
// gpt-oss has gpt-oss-20b's conventions (RoPE base 150000 with YaRN ×32
// over 4096, attention sinks, biases, a sliding window of 1/8 of the
// context, at most 128, on every other layer) and a mixture of experts
// whose active weights are a small part of the total.
// deepseek2 has DeepSeek V3's conventions at the preset's size (see
// mlaDims; YaRN ×40 with its log multiplier, one leading dense block, one
// shared expert, sigmoid routing with a selection bias among groups).
// glm4moe has GLM-4.5's (RoPE base 1e6 over half of each head, q/k/v
// biases and q/k norms, one leading dense block, one shared expert,
// sigmoid routing with a selection bias, weights renormalised and scaled
// by 2.5, no groups) and one multi-token-prediction block after the
// trunk, which neither engine computes.
var Families = []string{"llama", "llama3", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "gpt-oss", "mistral3", "deepseek2", "glm4moe"}

// ApplyFamily shapes o (a preset, or any shape) as family: it sets the
// architecture and the family's fields that o leaves unset.
func ApplyFamily(o GenOptions, family string) (GenOptions, error) {
	switch family {
	case "llama", "qwen2", "phi3":
		o.Arch = family
	case "llama3":
		o.Arch, o.RopeFreqs = "llama", true
		if o.RopeBase == 0 {
			o.RopeBase = 500000
		}
	case "gemma3":
		o.Arch = family
		if o.RopeBase == 0 {
			o.RopeBase = 1e6
		}
		if o.HeadDim == 0 && o.Heads > 0 {
			o.HeadDim = 2 * o.Dim / o.Heads
		}
		if o.SlidingWindow == 0 {
			o.SlidingWindow = min(512, max(o.ContextLen, 16)/8)
		}
	case "qwen3", "qwen3moe":
		o.Arch = family
		if o.RopeBase == 0 {
			o.RopeBase = 1e6
		}
		if family == "qwen3moe" && o.Experts == 0 {
			// Attention halved at 1b size, so that the experts are
			// most of the weights and a token reads about a quarter of them
			// (Qwen3-30B-A3B: a tenth).
			expertsBySize(&o, [3]int{32, 4, 256}, [3]int{64, 4, 256})
			if o.Dim >= 1024 {
				o.Heads, o.KVHeads = max(o.Heads/2, 1), max(o.KVHeads/2, 1)
			}
		}
		if o.HeadDim == 0 && o.Heads > 0 {
			o.HeadDim = 2 * o.Dim / o.Heads
		}
	case "mistral3":
		o.Arch = family
		if o.RopeBase == 0 {
			o.RopeBase = 1e6
		}
		if o.YaRN == 0 {
			o.YaRN, o.YaRNOrigCtx = 16, max(16, o.ContextLen/16)
		}
	case "deepseek2":
		o.Arch = family
		if o.YaRN == 0 {
			o.YaRN, o.YaRNOrigCtx = 40, max(16, o.ContextLen/40)
		}
		// Routed experts in groups of 2–16, half the groups usable
		// (DeepSeek V3: 256 in 8 groups, 4 used, 8 chosen).
		expertsBySize(&o, [3]int{16, 4, 256}, [3]int{64, 4, 256})
	case "glm4moe":
		o.Arch = family
		if o.RopeBase == 0 {
			o.RopeBase = 1e6
		}
		if o.NextN == 0 {
			o.NextN = 1
		}
		// As deepseek2's: GLM-4.5-Air has 128 experts, 8 chosen.
		expertsBySize(&o, [3]int{16, 4, 256}, [3]int{64, 4, 256})
	case "gpt-oss":
		o.Arch = family
		if o.RopeBase == 0 {
			o.RopeBase = 150000
		}
		if o.YaRN == 0 {
			o.YaRN, o.YaRNOrigCtx = 32, 4096
		}
		if o.SlidingWindow == 0 {
			o.SlidingWindow = min(128, max(o.ContextLen, 16)/8)
		}
		// A token reads an eighth of the experts at 1b size
		// (gpt-oss-20b: 4 of 32).
		expertsBySize(&o, [3]int{16, 4, 256}, [3]int{32, 4, 512})
	default:
		return o, fmt.Errorf("arch %q: want one of %v", family, Families)
	}
	return o, nil
}

// expertsBySize sets o's experts (count, used, ff), unless it has some:
// 8, 2, 64 at the tiny size (dim < 256), mid up to dim 1024, else large.
func expertsBySize(o *GenOptions, mid, large [3]int) {
	if o.Experts != 0 {
		return
	}
	e := [3]int{8, 2, 64}
	switch {
	case o.Dim >= 1024:
		e = large
	case o.Dim >= 256:
		e = mid
	}
	o.Experts, o.ExpertsUsed, o.ExpertFFDim = e[0], e[1], e[2]
}

// ChatMLTemplate is the chat template written into generated models:
// ChatML, with tools in Qwen 2.5's Hermes convention (a <tools> list in the
// system turn, calls as <tool_call> JSON, results as <tool_response> in a
// user turn). Without tools it renders plain ChatML.
const ChatMLTemplate = `{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and tools %}
{%- elif message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant\n' + (message.content or '') }}
{%- for tc in message.tool_calls %}
{%- if tc.function %}{%- set tc = tc.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tc.name + '", "arguments": ' + (tc.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`

// Special token ids of generated models.
const (
	genUnk, genBOS, genEOS, genImStart, genImEnd = 0, 1, 2, 3, 4
	genFirstByte                                 = 5
	genFirstPiece                                = genFirstByte + 256
)

func (o *GenOptions) fill() error {
	if o.Arch == "" {
		o.Arch = "llama"
	}
	if !slices.Contains(Supported, o.Arch) {
		return fmt.Errorf("arch %q: want one of %v", o.Arch, Supported)
	}
	if o.KVHeads == 0 {
		o.KVHeads = o.Heads
	}
	if o.HeadDim == 0 && o.Heads > 0 {
		o.HeadDim = o.Dim / o.Heads
	}
	if o.RopeBase == 0 {
		o.RopeBase = 10000
	}
	if o.FFDim == 0 {
		o.FFDim = (o.Dim*8/3 + 63) / 64 * 64
	}
	if o.ContextLen == 0 {
		o.ContextLen = 2048
	}
	if o.Type == "" {
		o.Type = "Q8_0"
	}
	switch {
	case o.Layers < 1 || o.Layers > 512:
		return fmt.Errorf("layers %d: want 1..512", o.Layers)
	case o.Dim < 32 || o.Dim%32 != 0 || o.Dim > 65536:
		return fmt.Errorf("dim %d: want a multiple of 32 up to 65536", o.Dim)
	case o.FFDim < 32 || o.FFDim%32 != 0:
		return fmt.Errorf("ff dim %d: want a multiple of 32", o.FFDim)
	case o.Heads < 1 || o.Dim%o.Heads != 0:
		return fmt.Errorf("%d heads: they must divide dim %d", o.Heads, o.Dim)
	case o.KVHeads < 1 || o.Heads%o.KVHeads != 0:
		return fmt.Errorf("%d kv heads: they must divide %d heads", o.KVHeads, o.Heads)
	case o.Vocab < genFirstPiece+64 || o.Vocab > 1<<20:
		return fmt.Errorf("vocab %d: want %d..%d", o.Vocab, genFirstPiece+64, 1<<20)
	case o.ContextLen < 16 || o.ContextLen > 1<<20:
		return fmt.Errorf("context length %d: want 16..%d", o.ContextLen, 1<<20)
	}
	moe := o.Arch == "qwen3moe" || o.Arch == "gpt-oss" || o.Arch == "deepseek2" || o.Arch == "glm4moe"
	switch {
	case moe && (o.Experts < 1 || o.Experts > 1024 || o.ExpertsUsed < 1 || o.ExpertsUsed > o.Experts):
		return fmt.Errorf("%d experts, %d used: want 1..1024 experts and 1..experts used", o.Experts, o.ExpertsUsed)
	case moe && (o.ExpertFFDim < 32 || o.ExpertFFDim%32 != 0):
		return fmt.Errorf("expert ff dim %d: want a multiple of 32", o.ExpertFFDim)
	case !moe && o.Experts != 0:
		return fmt.Errorf("experts are for qwen3moe, gpt-oss, deepseek2 and glm4moe, not %s", o.Arch)
	case !moe && o.Type == "MXFP4":
		return fmt.Errorf("type MXFP4 is for the experts of qwen3moe, gpt-oss, deepseek2 and glm4moe, not %s", o.Arch)
	case (o.NextN != 0 || o.NoQKNorm) && o.Arch != "glm4moe":
		return fmt.Errorf("multi-token-prediction blocks and NoQKNorm are for glm4moe, not %s", o.Arch)
	case o.NextN < 0 || o.NextN > 4:
		return fmt.Errorf("%d multi-token-prediction blocks: want 0..4", o.NextN)
	case o.Arch == "deepseek2" && (o.Heads%2 != 0 || o.Experts%4 != 0):
		return fmt.Errorf("deepseek2: %d heads and %d experts: want both even, the experts in 4 groups", o.Heads, o.Experts)
	case o.RopeFreqs && o.Arch != "llama":
		return fmt.Errorf("rope_freqs (Llama 3.x RoPE scaling) is for llama, not %s", o.Arch)
	case o.HeadDim < 2 || o.HeadDim%2 != 0 || o.HeadDim > 1024:
		return fmt.Errorf("head dim %d: want an even size up to 1024", o.HeadDim)
	case o.HeadDim != o.Dim/max(o.Heads, 1) && o.Arch != "qwen3" && o.Arch != "qwen3moe" && o.Arch != "gemma3" && o.Arch != "glm4moe":
		return fmt.Errorf("head dim %d: only qwen3, qwen3moe, gemma3 and glm4moe set it apart from dim/heads", o.HeadDim)
	case o.Arch == "glm4moe" && o.HeadDim%4 != 0:
		return fmt.Errorf("glm4moe: head dim %d: want a multiple of 4 (RoPE rotates an even half)", o.HeadDim)
	case o.YaRN != 0 && (o.YaRN <= 1 || o.YaRN > 1024 || o.Arch == "gemma3" || o.Arch == "phi3" || o.RopeFreqs):
		return fmt.Errorf("YaRN factor %v: want 1..1024, and not for gemma3, phi3 or with rope_freqs", o.YaRN)
	case o.SlidingWindow != 0 && (o.Arch != "gemma3" && o.Arch != "gpt-oss" || o.SlidingWindow < 2 || o.SlidingWindow > o.ContextLen):
		return fmt.Errorf("sliding window %d: for gemma3 and gpt-oss only, 2..context length", o.SlidingWindow)
	case o.Arch == "gpt-oss" && o.SlidingWindow == 0:
		return fmt.Errorf("gpt-oss needs a sliding window")
	}
	if _, ok := genTypes[o.Type]; !ok {
		return fmt.Errorf("type %q: want F32, F16, BF16, Q8_0, Q4_0 or MXFP4", o.Type)
	}
	return nil
}

var genTypes = map[string]gguf.TensorType{"F32": gguf.F32, "F16": gguf.F16, "BF16": gguf.BF16, "Q8_0": gguf.Q8_0, "Q4_0": gguf.Q4_0, "MXFP4": gguf.MXFP4}

// fileTypes are general.file_type values (llama.cpp's LLAMA_FTYPE).
var fileTypes = map[string]uint32{"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "BF16": 32, "MXFP4": 38}

// Generate writes a random-weight model of shape o to path, atomically.
// The same options always give the same bytes. Its output is gibberish:
// it exists to exercise the runner, not to say anything.
func Generate(path string, o GenOptions) error { return GenerateProgress(path, o, nil) }

// GenerateProgress is Generate, calling progress (when not nil) with the
// tensor bytes written so far and the total, after every tensor row.
func GenerateProgress(path string, o GenOptions, progress func(done, total uint64)) error {
	if err := o.fill(); err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	kvs, err := genMetadata(o)
	if err != nil {
		return err
	}
	ts := genTensors(o)
	if progress != nil {
		total, _ := GenSize(o)
		var done uint64
		for i := range ts {
			data := ts[i].Data
			ts[i].Data = func(w io.Writer) error {
				return data(countingWriter{w, func(n int) { done += uint64(n); progress(done, total) }})
			}
		}
	}
	return gguf.WriteFile(path, kvs, ts)
}

type countingWriter struct {
	w   io.Writer
	add func(int)
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.add(n)
	return n, err
}

// GenSize is the file size Generate writes for o (roughly: the weights).
func GenSize(o GenOptions) (uint64, error) {
	if err := o.fill(); err != nil {
		return 0, err
	}
	var n uint64
	for _, t := range genTensors(o) {
		elems := uint64(1)
		for _, d := range t.Dims {
			elems *= d
		}
		sz, _ := t.Type.RowBytes(elems)
		n += sz
	}
	return n, nil
}

func genMetadata(o GenOptions) ([]gguf.KV, error) {
	a := o.Arch
	tokens, scores, types := genVocab(o.Vocab)
	if a == "phi3" {
		// Phi-3's own control tokens, which llama.cpp looks up by name in
		// any model called phi3; in the last two ids, so that every other
		// id is the same as in the other families.
		for i, t := range []string{"<|endoftext|>", "<|end|>"} {
			k := len(tokens) - 2 + i
			tokens[k], scores[k], types[k] = t, 0, 3
		}
	}
	name := fmt.Sprintf("orrery-gen-%s-%dL-%dd-%s", a, o.Layers, o.Dim, o.Type)
	// The attention as the file states it: deepseek2's MLA caches one
	// latent kv head (see mlaDims); Gemma and DeepSeek norm with ε 1e-6.
	kvHeads, keyLen, valLen, ropeDim := o.KVHeads, o.HeadDim, o.HeadDim, o.HeadDim
	if a == "deepseek2" {
		_, kvLora, _, rope, _ := mlaDims(o)
		kvHeads, keyLen, valLen, ropeDim = 1, kvLora+rope, kvLora, rope
	}
	if a == "glm4moe" { // GLM-4.5's partial_rotary_factor 0.5
		ropeDim = o.HeadDim / 2
	}
	eps := float32(1e-5)
	if a == "gemma3" || a == "deepseek2" {
		eps = 1e-6
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: a},
		{Key: "general.name", Value: name},
		{Key: "general.description", Value: "random weights from orrery gen-model (seed " + fmt.Sprint(o.Seed) + "): output is gibberish"},
		{Key: "general.file_type", Value: fileTypes[o.Type]},
		{Key: a + ".context_length", Value: uint32(o.ContextLen)},
		{Key: a + ".embedding_length", Value: uint32(o.Dim)},
		{Key: a + ".block_count", Value: uint32(o.Layers + o.NextN)},
		{Key: a + ".feed_forward_length", Value: uint32(o.FFDim)},
		{Key: a + ".attention.head_count", Value: uint32(o.Heads)},
		{Key: a + ".attention.head_count_kv", Value: uint32(kvHeads)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: eps},
		{Key: a + ".rope.freq_base", Value: float32(o.RopeBase)},
		{Key: a + ".rope.dimension_count", Value: uint32(ropeDim)},
		{Key: a + ".attention.key_length", Value: uint32(keyLen)},
		{Key: a + ".attention.value_length", Value: uint32(valLen)},
		{Key: a + ".vocab_size", Value: uint32(o.Vocab)},
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.scores", Value: scores},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(genBOS)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(genImEnd)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(genUnk)},
		{Key: "tokenizer.ggml.add_bos_token", Value: true},
		{Key: "tokenizer.ggml.add_eos_token", Value: o.Pooling == PoolLast},
		{Key: "tokenizer.chat_template", Value: cmp.Or(o.ChatTemplate, ChatMLTemplate)},
	}
	if o.Pooling != PoolNone {
		kvs = append(kvs, gguf.KV{Key: a + ".pooling_type", Value: o.Pooling.GGUFValue()})
	}
	if o.YaRN != 0 {
		kvs = append(kvs, gguf.KV{Key: a + ".rope.scaling.type", Value: "yarn"},
			gguf.KV{Key: a + ".rope.scaling.factor", Value: float32(o.YaRN)},
			gguf.KV{Key: a + ".rope.scaling.original_context_length", Value: uint32(cmp.Or(o.YaRNOrigCtx, o.ContextLen))})
	}
	if a == "mistral3" {
		// Ministral 3's: the temperature's floor is the original
		// context (the context, without YaRN).
		kvs = append(kvs, gguf.KV{Key: a + ".attention.temperature_scale", Value: float32(0.1)})
		if o.YaRN != 0 {
			kvs = append(kvs, gguf.KV{Key: a + ".rope.scaling.yarn_log_multiplier", Value: float32(1)},
				gguf.KV{Key: a + ".rope.scaling.yarn_beta_fast", Value: float32(32)},
				gguf.KV{Key: a + ".rope.scaling.yarn_beta_slow", Value: float32(1)})
		}
	}
	if o.SlidingWindow > 0 {
		kvs = append(kvs, gguf.KV{Key: a + ".attention.sliding_window", Value: uint32(o.SlidingWindow)})
	}
	if a == "gemma3" && o.SlidingWindow > 0 {
		kvs = append(kvs, gguf.KV{Key: a + ".rope.freq_base_swa", Value: float32(10000)})
	}
	if a == "deepseek2" {
		kvs = deepseekMetadata(o, kvs)
	}
	if a == "glm4moe" { // GLM-4.5's, as its converter writes them
		kvs = append(kvs, sharedExpertsMetadata(a)...)
		if o.NextN > 0 {
			kvs = append(kvs, gguf.KV{Key: a + ".nextn_predict_layers", Value: uint32(o.NextN)})
		}
	}
	if o.Experts > 0 {
		kvs = append(kvs, gguf.KV{Key: a + ".expert_count", Value: uint32(o.Experts)},
			gguf.KV{Key: a + ".expert_used_count", Value: uint32(o.ExpertsUsed)},
			gguf.KV{Key: a + ".expert_feed_forward_length", Value: uint32(o.ExpertFFDim)})
	}
	return kvs, nil
}

// genVocab is a SentencePiece vocabulary that can encode any text: special
// tokens, the 256 byte-fallback tokens, then pieces (letters, common words
// with the SentencePiece space mark, and letter pairs), longer pieces
// scoring higher so that they are preferred.
func genVocab(n int) (tokens []string, scores []float32, types []int32) {
	add := func(t string, s float32, typ int32) {
		tokens, scores, types = append(tokens, t), append(scores, s), append(types, typ)
	}
	add("<unk>", 0, 2)
	add("<s>", 0, 3)
	add("</s>", 0, 3)
	add("<|im_start|>", 0, 3)
	add("<|im_end|>", 0, 3)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, 6)
	}
	seen := map[string]bool{}
	piece := func(p string) {
		if len(tokens) < n && !seen[p] {
			seen[p] = true
			add(p, float32(len([]rune(p)))-float32(len(tokens))*1e-6, 1)
		}
	}
	piece("▁")
	for c := byte(' ' + 1); c < 127; c++ {
		piece(string(c))
	}
	for _, w := range []string{"the", "of", "and", "to", "in", "is", "it", "you", "that", "he", "was", "for", "on",
		"are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "hello",
		"world", "what", "orrery", "cluster", "token", "model", "Mac", "trace", "node", "rank"} {
		piece("▁" + w)
		piece(w)
	}
	letters := "etaoinshrdlucmfwypvbgkjqxz"
	for _, a := range letters {
		piece("▁" + string(a))
	}
	for _, a := range letters {
		for _, b := range letters {
			piece(string(a) + string(b))
		}
	}
	for _, a := range letters {
		for _, b := range letters {
			for _, c := range letters {
				piece(string(a) + string(b) + string(c))
			}
		}
	}
	for i := 0; len(tokens) < n; i++ {
		add(fmt.Sprintf("<unused%d>", i), -1e9, 5)
	}
	return tokens, scores, types
}

// mlaDims are a generated deepseek2's attention sizes, from the head size
// h = Dim/Heads, in DeepSeek V3's proportions (its h 128): q rank Dim/2,
// latent 4h, rotary h/2 and non-rotary h key parts, values h; at least 32
// and 16 where a row must hold whole quantization blocks.
func mlaDims(o GenOptions) (qLora, kvLora, nope, rope, v int) {
	h := o.Dim / o.Heads
	return o.Dim / 2, 4 * h, max(h, 32), max(h/2, 16), h
}

// deepseekMetadata adds deepseek2's MLA sizes and its experts'
// conventions to kvs.
func deepseekMetadata(o GenOptions, kvs []gguf.KV) []gguf.KV {
	a := o.Arch
	qLora, kvLora, nope, rope, v := mlaDims(o)
	kvs = append(kvs, gguf.KV{Key: a + ".attention.q_lora_rank", Value: uint32(qLora)},
		gguf.KV{Key: a + ".attention.kv_lora_rank", Value: uint32(kvLora)},
		gguf.KV{Key: a + ".attention.key_length_mla", Value: uint32(nope + rope)},
		gguf.KV{Key: a + ".attention.value_length_mla", Value: uint32(v)})
	kvs = append(kvs, sharedExpertsMetadata(a)...)
	kvs = append(kvs, gguf.KV{Key: a + ".expert_group_count", Value: uint32(4)},
		gguf.KV{Key: a + ".expert_group_used_count", Value: uint32(2)})
	if o.YaRN != 0 {
		// Its converter's convention: 0.1 × mscale_all_dim (1).
		kvs = append(kvs, gguf.KV{Key: a + ".rope.scaling.yarn_log_multiplier", Value: float32(0.1)})
	}
	return kvs
}

// sharedExpertsMetadata is DeepSeek V3's and GLM-4.5's experts'
// conventions: one leading dense block, one shared expert, sigmoid
// routing, the chosen weights renormalised and scaled by 2.5.
func sharedExpertsMetadata(a string) []gguf.KV {
	return []gguf.KV{{Key: a + ".leading_dense_block_count", Value: uint32(1)},
		{Key: a + ".expert_shared_count", Value: uint32(1)},
		{Key: a + ".expert_weights_scale", Value: float32(2.5)},
		{Key: a + ".expert_weights_norm", Value: true},
		{Key: a + ".expert_gating_func", Value: uint32(2)}}
}

// GenHeader is the header Generate would write for o (metadata and tensor
// directory, no data): for the cost model's projections of shapes too
// large to write. retype, when not nil, gives each tensor another type
// (e.g. a K-quant mix), its size following.
func GenHeader(o GenOptions, retype func(name string, t gguf.TensorType) gguf.TensorType) (*gguf.File, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	kvs, err := genMetadata(o)
	if err != nil {
		return nil, err
	}
	f := &gguf.File{KV: kvs}
	var off uint64
	for _, t := range genTensors(o) {
		typ := t.Type
		if retype != nil {
			typ = retype(t.Name, typ)
		}
		elems := uint64(1)
		for _, d := range t.Dims {
			elems *= d
		}
		size, ok := typ.RowBytes(elems)
		if !ok {
			return nil, fmt.Errorf("tensor %s: %v does not hold %d values", t.Name, typ, elems)
		}
		f.Tensors = append(f.Tensors, gguf.TensorInfo{Name: t.Name, Dims: t.Dims, Type: typ, Offset: off, Size: size})
		off += size
	}
	return f, nil
}
