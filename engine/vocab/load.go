package vocab

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dlclark/regexp2"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// Loading: reading and checking a vocabulary from GGUF metadata, with the
// fix-ups llama.cpp applies by token name and model name.

// controlNames are the token texts llama.cpp's vocabulary loader treats as
// control tokens (end of turn, end of message, fill-in-the-middle, end of
// generation), even where a file types them otherwise.
var controlNames = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
	"<EOT>", "_<EOT>", "[EOT]", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "<end_of_utterance>", "<|eom_id|>", "<|fim_prefix|>",
	"<fim-prefix>", "<fim_prefix>", "<\uFF5Cfim\u2581begin\uFF5C>", "<PRE>", "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>",
	"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uFF5Cfim\u2581hole\uFF5C>", "<SUF>", "\u2581<SUF>", "<|code_suffix|>",
	"<|suffix|>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uFF5Cfim\u2581end\uFF5C>", "<MID>", "\u2581<MID>",
	"<|code_middle|>", "<|middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
	"<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "</s>", "[EOS]",
	"<eos>", "<turn|>", "<|tool_response>", "[e~["}

// eogNames end generation besides EOS, as in llama.cpp.
var eogNames = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
	"<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "[e~["}

// Keys of the token list and its per-token arrays.
const (
	kTokens = "tokenizer.ggml.tokens"
	kScores = "tokenizer.ggml.scores"
	kTypes  = "tokenizer.ggml.token_type"
	kMerges = "tokenizer.ggml.merges"
)

// New reads the vocabulary from a model's metadata, checking it: every
// inconsistency is an error naming the key.
func New(f *gguf.File) (*Vocab, error) {
	v, err := readTokens(f)
	if err != nil {
		return nil, err
	}
	model := f.String("tokenizer.ggml.model", "llama")
	if err := v.setModel(f, model); err != nil {
		return nil, err
	}
	if err := v.readSpecialIDs(f, model); err != nil {
		return nil, err
	}
	v.retype()
	v.fimEOG(f)
	v.dropEnd()
	v.listSpecial(f)
	return v, nil
}

// readTokens reads the tokens and their scores and types.
func readTokens(f *gguf.File) (*Vocab, error) {
	raw, ok := f.Get(kTokens)
	if !ok {
		return nil, fmt.Errorf("%s: missing", kTokens)
	}
	tokens, ok := raw.([]string)
	if !ok || len(tokens) == 0 {
		return nil, fmt.Errorf("%s: want a non-empty array of strings, got %T", kTokens, raw)
	}
	if len(tokens) > MaxTokens {
		return nil, fmt.Errorf("%s: %d tokens, at most %d", kTokens, len(tokens), MaxTokens)
	}
	v := &Vocab{tokens: tokens, toID: make(map[string]int32, len(tokens)), bos: -1, eos: -1, unk: -1}
	for i, t := range tokens {
		if len(t) > MaxTokenLen {
			return nil, fmt.Errorf("%s: token %d is %d bytes, at most %d", kTokens, i, len(t), MaxTokenLen)
		}
		if _, dup := v.toID[t]; !dup {
			v.toID[t] = int32(i)
		}
	}
	if raw, ok := f.Get(kScores); ok {
		s, ok := raw.([]float32)
		if !ok || len(s) != len(tokens) {
			return nil, fmt.Errorf("%s: want %d float32 scores, got %s", kScores, len(tokens), describe(raw))
		}
		v.scores = s
	} else {
		v.scores = make([]float32, len(tokens))
	}
	if raw, ok := f.Get(kTypes); ok {
		t, ok := raw.([]int32)
		if !ok || len(t) != len(tokens) {
			return nil, fmt.Errorf("%s: want %d int32 types, got %s", kTypes, len(tokens), describe(raw))
		}
		for i, x := range t {
			if x < TypeUndefined || x > TypeByte {
				return nil, fmt.Errorf("%s: token %d has type %d, want 0..6", kTypes, i, x)
			}
		}
		v.types = slices.Clone(t)
	} else {
		v.types = slices.Repeat([]int32{TypeNormal}, len(tokens))
	}
	v.lstrip, v.rstrip = make([]bool, len(tokens)), make([]bool, len(tokens))
	return v, nil
}

// setModel sets up the tokenizer model (tokenizer.ggml.model): SentencePiece,
// or BPE with its merges and pre-tokenizer.
func (v *Vocab) setModel(f *gguf.File, model string) error {
	switch model {
	case "llama":
		v.kind = spm
		v.addSpacePrefix, v.escapeSpaces, v.addBOS = true, true, true
	case "gpt2", "gemma4":
		v.kind = bpe
		v.cleanSpaces = true
		if err := v.readMerges(f, model); err != nil {
			return err
		}
		pre := f.String("tokenizer.ggml.pre", "default")
		if model == "gemma4" {
			pre = "gemma4"
		}
		if err := v.setPre(pre); err != nil {
			return fmt.Errorf("tokenizer.ggml.pre: %w", err)
		}
	case "bert":
		return fmt.Errorf("tokenizer.ggml.model %q (WordPiece, BERT-style embedding models) is not supported; supported: llama (SentencePiece), gpt2 (BPE), gemma4", model)
	case "t5":
		return fmt.Errorf("tokenizer.ggml.model %q (Unigram, T5-style) is not supported; supported: llama (SentencePiece), gpt2 (BPE), gemma4", model)
	default:
		return fmt.Errorf("tokenizer.ggml.model %q is not supported; supported: llama (SentencePiece), gpt2 (BPE), gemma4", model)
	}
	return nil
}

// readMerges reads a BPE vocabulary's merges, each two tokens separated by a
// space, ranked by position; gemma4 requires them.
func (v *Vocab) readMerges(f *gguf.File, model string) error {
	raw, ok := f.Get(kMerges)
	if !ok {
		if model == "gemma4" {
			return fmt.Errorf("%s: missing (a gemma4 vocabulary needs its merges)", kMerges)
		}
		return nil
	}
	ms, ok := raw.([]string)
	if !ok {
		return fmt.Errorf("%s: want an array of strings, got %T", kMerges, raw)
	}
	if len(ms) > MaxMerges {
		return fmt.Errorf("%s: %d merges, at most %d", kMerges, len(ms), MaxMerges)
	}
	v.ranks = make(map[string]int, len(ms))
	for i, m := range ms {
		sp := strings.IndexByte(m[min(1, len(m)):], ' ')
		if sp < 0 {
			return fmt.Errorf("%s: merge %d %q is not two tokens separated by a space", kMerges, i, m)
		}
		sp++
		left, right := m[:sp], m[sp+1:]
		if _, ok := v.toID[left+right]; !ok {
			return fmt.Errorf("%s: merge %d %q makes %q, which is not a token", kMerges, i, m, left+right)
		}
		if _, seen := v.ranks[m]; !seen {
			v.ranks[m] = i
		}
	}
	return nil
}

// setPre picks the pre-tokenizer regexes llama.cpp uses for a
// tokenizer.ggml.pre name.
func (v *Vocab) setPre(pre string) error {
	v.pre = pre
	v.byteEncode = true
	var exprs []string
	const (
		contractions = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])`
		gpt2         = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	)
	switch pre {
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx", "smaug-bpe":
		exprs = []string{contractions + `|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
		v.ignoreMerges = pre != "dbrx" && pre != "smaug-bpe"
	case "deepseek-llm":
		v.cleanSpaces = false
		// Written with escapes: the ranges name exact code points that
		// Unicode normalization of the source would change (U+1F7D, U+2126).
		exprs = []string{
			`[\r\n]`,
			"\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+",
			"\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
			`\s+\z`,
			"[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
			`\p{N}+`,
		}
	case "deepseek-coder":
		v.cleanSpaces = false
		exprs = []string{`[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+", `\p{N}`}
	case "falcon":
		exprs = []string{`[\p{P}\$\+<=>\^~\|` + "`" + `]+`, gpt2, `[0-9][0-9][0-9]`}
	case "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b":
		if pre == "command-r" {
			v.cleanSpaces = false
		}
		exprs = []string{`\p{N}`, gpt2}
	case "gpt-2", "phi-2", "mpt", "olmo", "jais", "gpt2", "jina-v1-en", "jina-v2-code", "roberta-bpe":
		exprs = []string{gpt2}
	case "qwen2", "deepseek-r1-qwen", "stablelm2":
		if pre != "stablelm2" {
			v.cleanSpaces = false
		}
		exprs = []string{contractions + `|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	case "qwen35":
		v.cleanSpaces = false
		exprs = []string{contractions + `|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	case "gpt-4o", "llama4", "kanana2", "talkie":
		// o200k (gpt-oss, Llama 4): camel-case words split before each
		// capitalised part; llama.cpp's form of the tokenizer.json regex,
		// which spells the Unicode classes out with lookaheads.
		v.cleanSpaces = false
		exprs = []string{`[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+` + contractions + `?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*` + contractions + `?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	case "deepseek-v3":
		// DeepSeek V3/R1: digits in threes, CJK runs, then words with
		// punctuation glued before letters. Escapes as for deepseek-llm.
		v.cleanSpaces = false
		exprs = []string{`\p{N}{1,3}`, "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
			`[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	case "kimi-k2":
		// Kimi K2: llama.cpp's hand-written split (kimi.go), no regexes. A file without merges is accepted, as llama.cpp
		// accepts it for kimi-k2 alone: with no merges each character is
		// its own token (or its bytes'), in both.
		v.cleanSpaces, v.custom = false, splitKimiK2
	case "tekken":
		// Mistral's Tekken (Ministral 3, Mistral Nemo/Small): the o200k
		// split without contractions, one digit at a time.
		v.cleanSpaces, v.ignoreMerges = false, true
		exprs = []string{`[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	case "gemma4":
		// SentencePiece-style BPE: spaces become ▁, merges run over
		// whole lines, byte fallback is <0xNN>.
		v.escapeSpaces, v.byteEncode = true, false
		exprs = []string{`[^\n]+|[\n]+`}
	case "default":
		exprs = []string{`[\p{P}\$\+<=>\^~\|]+`, gpt2, `\p{N}+`, `[0-9][0-9][0-9]`}
	default:
		return fmt.Errorf("%q is not supported; supported: llama-bpe (Llama 3), gpt-4o (gpt-oss, Llama 4), tekken (Mistral), deepseek-v3, kimi-k2, qwen2, qwen35, deepseek-llm, deepseek-coder, falcon, starcoder, refact, command-r, gpt-2, mpt, olmo, gemma4, default and their aliases", pre)
	}
	for _, e := range exprs {
		re, err := regexp2.Compile(e, regexp2.None)
		if err != nil {
			return fmt.Errorf("%q: regex %q: %w", pre, e, err)
		}
		re.MatchTimeout = matchTimeout // set once: a Regexp is shared by concurrent Encodes
		v.regexes = append(v.regexes, re)
	}
	return nil
}

// readSpecialIDs reads the BOS, EOS and unknown token ids and whether BOS and
// EOS are added.
func (v *Vocab) readSpecialIDs(f *gguf.File, model string) error {
	id := func(key string) (int32, error) {
		raw, ok := f.Get(key)
		if !ok {
			return -1, nil
		}
		n := f.Uint(key, 1<<40)
		if n >= uint64(len(v.tokens)) {
			return -1, fmt.Errorf("%s: %v is outside the %d-token vocabulary", key, raw, len(v.tokens))
		}
		return int32(n), nil
	}
	var err error
	if v.bos, err = id("tokenizer.ggml.bos_token_id"); err != nil {
		return err
	}
	if v.eos, err = id("tokenizer.ggml.eos_token_id"); err != nil {
		return err
	}
	if v.unk, err = id("tokenizer.ggml.unknown_token_id"); err != nil {
		return err
	}
	if model == "llama" && v.unk < 0 {
		v.unk = v.toID["<unk>"] // SentencePiece's default
		if _, ok := v.toID["<unk>"]; !ok {
			v.unk = -1
		}
	}
	switch v.pre {
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "tekken":
		v.addBOS = true
	}
	v.addBOS = f.Bool("tokenizer.ggml.add_bos_token", v.addBOS)
	if model == "gemma4" {
		v.addBOS = true // as llama.cpp overrides it for Gemma 4
	}
	v.addEOS = f.Bool("tokenizer.ggml.add_eos_token", false)
	v.addSpacePrefix = f.Bool("tokenizer.ggml.add_space_prefix", v.addSpacePrefix)
	if v.addBOS && v.bos < 0 {
		v.addBOS = false
	}
	if v.addEOS && v.eos < 0 {
		v.addEOS = false
	}
	return nil
}

// retype makes the tokens llama.cpp recognises by name control (or
// user-defined) tokens, and lists the tokens that end generation.
func (v *Vocab) retype() {
	// Tokens llama.cpp recognises by name as end-of-turn, fill-in-the-middle
	// or end-of-generation markers are control tokens whatever the file
	// says (they are then matched in text when special tokens are parsed).
	for _, s := range controlNames {
		if id, ok := v.toID[s]; ok && v.types[id] != TypeControl {
			v.types[id] = TypeControl
		}
	}
	// gpt-oss's harmony markers are always rendered.
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := v.toID[s]; ok {
			v.types[id] = TypeUserDefined
		}
	}
	if v.eos >= 0 {
		v.eog = append(v.eog, v.eos)
	}
	_, toolResponse := v.toID["<|tool_response>"]
	for _, s := range eogNames {
		id, ok := v.toID[s]
		if !ok || slices.Contains(v.eog, id) {
			continue
		}
		if s == "</s>" && toolResponse {
			// Gemma 4: </s> is ordinary text there (llama.cpp).
			v.types[id] = TypeNormal
			continue
		}
		v.eog = append(v.eog, id)
	}
}

// fimNames are the names llama.cpp finds the fill-in-the-middle pad,
// repository and file-separator tokens by, where the metadata key does not
// give them.
var fimNames = []struct {
	key   string
	names []string
}{
	{"tokenizer.ggml.fim_pad_token_id", []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
	{"tokenizer.ggml.fim_rep_token_id", []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
	{"tokenizer.ggml.fim_sep_token_id", []string{"<|file_sep|>"}},
}

// fimEOG makes the fill-in-the-middle pad, repository and file-separator
// tokens end generation, as llama.cpp does (Kimi K2's [PAD] is its pad,
// Qwen's <|fim_pad|>, <|repo_name|>, <|file_sep|>): each is the id its
// metadata key gives (one outside the vocabulary is ignored, as llama.cpp
// ignores it), else the token found by name. Where a vocabulary holds
// several of one kind's names, llama.cpp takes whichever its hash map
// yields first; this takes the first in fimNames' order.
func (v *Vocab) fimEOG(f *gguf.File) {
	for _, k := range fimNames {
		id := int32(-1)
		if _, ok := f.Get(k.key); ok {
			if n := f.Uint(k.key, 1<<40); n < uint64(len(v.tokens)) {
				id = int32(n)
			}
		}
		for _, s := range k.names {
			if id >= 0 {
				break
			}
			if t, ok := v.toID[s]; ok {
				id = t
			}
		}
		if id >= 0 && !slices.Contains(v.eog, id) {
			v.eog = append(v.eog, id)
		}
	}
}

// dropEnd is llama.cpp's workaround for gpt-oss's harmony and Solar
// Open: where <|return|>, <|call|> and <|end|> (or <|calls|>, <|flush|>
// and <|end|>) all end generation, <|end|> does not (it ends a message,
// such as the reasoning before the answer).
func (v *Vocab) dropEnd() {
	has := map[string]bool{}
	end := int32(-1)
	for _, id := range v.eog {
		t := v.tokens[id]
		has[t] = true
		if t == "<|end|>" {
			end = id
		}
	}
	call := has["<|call|>"] || has["<|calls|>"]
	if end >= 0 && call && (has["<|return|>"] || has["<|flush|>"]) {
		v.eog = slices.DeleteFunc(v.eog, func(id int32) bool { return id == end })
	}
}

// listSpecial lists the special tokens, longest first, and which of them
// swallow the whitespace after them.
func (v *Vocab) listSpecial(f *gguf.File) {
	for i, t := range v.types {
		switch t {
		case TypeControl, TypeUserDefined, TypeUnknown:
			if v.tokens[i] != "" {
				v.special = append(v.special, int32(i))
			}
		}
	}
	slices.SortStableFunc(v.special, func(a, b int32) int { return len(v.tokens[b]) - len(v.tokens[a]) })
	// Phi-3's special tokens swallow the whitespace after them, as its
	// tokenizer.json says (llama.cpp keys this on the model's name).
	if name := strings.ToLower(f.String("general.name", "")); strings.Contains(name, "phi-3") || strings.Contains(name, "phi3") {
		for _, id := range v.special {
			v.rstrip[id] = true
		}
		if id, ok := v.toID["</s>"]; ok {
			v.rstrip[id] = true
		}
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			if id, ok := v.toID[s]; ok {
				v.rstrip[id] = false
			}
		}
	}
}

func describe(v any) string {
	switch x := v.(type) {
	case []float32:
		return fmt.Sprintf("%d float32s", len(x))
	case []int32:
		return fmt.Sprintf("%d int32s", len(x))
	case []string:
		return fmt.Sprintf("%d strings", len(x))
	}
	return fmt.Sprintf("%T", v)
}
