// Package vocab tokenizes and detokenizes text with a GGUF model's
// vocabulary exactly as llama.cpp does (its llama-vocab.cpp is the
// reference; this is a port of its logic, not of its code): SentencePiece
// ("llama": score-ordered bigram merges over characters, a space prefix,
// ▁ for spaces, byte fallback), byte-level BPE ("gpt2": the pre-tokenizer
// regexes of every tokenizer.ggml.pre llama.cpp's test vocabularies use,
// then rank-ordered merges) and Gemma 4's SentencePiece-style BPE
// ("gemma4"). Special tokens in the text are matched first, longest first.
// WordPiece (BERT) vocabularies are refused.
package vocab

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// Token types as GGUF stores them (tokenizer.ggml.token_type).
const (
	TypeUndefined   = 0
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// Limits on what a vocabulary may hold: a file beyond them is refused.
const (
	MaxTokens   = 1 << 22 // 4 M tokens
	MaxTokenLen = 64 << 10
	MaxMerges   = 1 << 23
)

type kind int

const (
	spm kind = iota
	bpe
)

// Vocab is a loaded vocabulary. It is safe for concurrent use.
type Vocab struct {
	kind   kind
	tokens []string
	scores []float32
	types  []int32
	lstrip []bool
	rstrip []bool
	toID   map[string]int32
	ranks  map[string]int // "left right" → merge rank

	bos, eos, unk  int32 // -1: none
	addBOS, addEOS bool

	pre            string
	regexes        []*regexp2.Regexp
	addSpacePrefix bool // SPM: a space before the text
	escapeSpaces   bool // " " → "▁" before tokenizing
	cleanSpaces    bool // detokenize: " ," → ","
	ignoreMerges   bool // a whole pre-token that is a token is kept
	byteEncode     bool // GPT-2 byte-to-unicode mapping

	special []int32 // control, user-defined and unknown tokens, longest first
	eog     []int32 // tokens that end generation
}

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

// New reads the vocabulary from a model's metadata, checking it: every
// inconsistency is an error naming the key.
func New(f *gguf.File) (*Vocab, error) {
	const kTokens, kScores, kTypes, kMerges = "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"
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

	model := f.String("tokenizer.ggml.model", "llama")
	switch model {
	case "llama":
		v.kind = spm
		v.addSpacePrefix, v.escapeSpaces, v.addBOS = true, true, true
	case "gpt2", "gemma4":
		v.kind = bpe
		v.cleanSpaces = true
		if raw, ok := f.Get(kMerges); ok {
			ms, ok := raw.([]string)
			if !ok {
				return nil, fmt.Errorf("%s: want an array of strings, got %T", kMerges, raw)
			}
			if len(ms) > MaxMerges {
				return nil, fmt.Errorf("%s: %d merges, at most %d", kMerges, len(ms), MaxMerges)
			}
			v.ranks = make(map[string]int, len(ms))
			for i, m := range ms {
				sp := strings.IndexByte(m[min(1, len(m)):], ' ')
				if sp < 0 {
					return nil, fmt.Errorf("%s: merge %d %q is not two tokens separated by a space", kMerges, i, m)
				}
				sp++
				left, right := m[:sp], m[sp+1:]
				if _, ok := v.toID[left+right]; !ok {
					return nil, fmt.Errorf("%s: merge %d %q makes %q, which is not a token", kMerges, i, m, left+right)
				}
				if _, seen := v.ranks[m]; !seen {
					v.ranks[m] = i
				}
			}
		} else if model == "gemma4" {
			return nil, fmt.Errorf("%s: missing (a gemma4 vocabulary needs its merges)", kMerges)
		}
		pre := f.String("tokenizer.ggml.pre", "default")
		if model == "gemma4" {
			pre = "gemma4"
		}
		if err := v.setPre(pre); err != nil {
			return nil, fmt.Errorf("tokenizer.ggml.pre: %w", err)
		}
	case "bert":
		return nil, fmt.Errorf("tokenizer.ggml.model %q (WordPiece, BERT-style embedding models) is not supported; supported: llama (SentencePiece), gpt2 (BPE), gemma4", model)
	case "t5":
		return nil, fmt.Errorf("tokenizer.ggml.model %q (Unigram, T5-style) is not supported; supported: llama (SentencePiece), gpt2 (BPE), gemma4", model)
	default:
		return nil, fmt.Errorf("tokenizer.ggml.model %q is not supported; supported: llama (SentencePiece), gpt2 (BPE), gemma4", model)
	}

	id := func(key string) (int32, error) {
		raw, ok := f.Get(key)
		if !ok {
			return -1, nil
		}
		n := f.Uint(key, 1<<40)
		if n >= uint64(len(tokens)) {
			return -1, fmt.Errorf("%s: %v is outside the %d-token vocabulary", key, raw, len(tokens))
		}
		return int32(n), nil
	}
	var err error
	if v.bos, err = id("tokenizer.ggml.bos_token_id"); err != nil {
		return nil, err
	}
	if v.eos, err = id("tokenizer.ggml.eos_token_id"); err != nil {
		return nil, err
	}
	if v.unk, err = id("tokenizer.ggml.unknown_token_id"); err != nil {
		return nil, err
	}
	if model == "llama" && v.unk < 0 {
		v.unk = v.toID["<unk>"] // SentencePiece's default
		if _, ok := v.toID["<unk>"]; !ok {
			v.unk = -1
		}
	}
	switch v.pre {
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2":
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
	for i, t := range v.types {
		switch t {
		case TypeControl, TypeUserDefined, TypeUnknown:
			if tokens[i] != "" {
				v.special = append(v.special, int32(i))
			}
		}
	}
	slices.SortStableFunc(v.special, func(a, b int32) int { return len(tokens[b]) - len(tokens[a]) })
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
	return v, nil
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
	case "gemma4":
		// SentencePiece-style BPE: spaces become ▁, merges run over
		// whole lines, byte fallback is <0xNN>.
		v.escapeSpaces, v.byteEncode = true, false
		exprs = []string{`[^\n]+|[\n]+`}
	case "default":
		exprs = []string{`[\p{P}\$\+<=>\^~\|]+`, gpt2, `\p{N}+`, `[0-9][0-9][0-9]`}
	default:
		return fmt.Errorf("%q is not supported; supported: llama-bpe (Llama 3), qwen2, qwen35, deepseek-llm, deepseek-coder, falcon, starcoder, refact, command-r, gpt-2, mpt, olmo, gemma4, default and their aliases", pre)
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

// Len is the number of tokens.
func (v *Vocab) Len() int { return len(v.tokens) }

// BOS and EOS are the beginning- and end-of-sequence ids (-1: none).
func (v *Vocab) BOS() int32 { return v.bos }
func (v *Vocab) EOS() int32 { return v.eos }

// EndsGeneration reports whether id ends generation (EOS, end of turn…).
func (v *Vocab) EndsGeneration(id int32) bool { return slices.Contains(v.eog, id) }

// AddBOS reports whether encoding with special tokens prepends BOS.
func (v *Vocab) AddBOS() bool { return v.addBOS }

// Text is a token's text as stored; "" outside the vocabulary.
func (v *Vocab) Text(id int32) string {
	if id < 0 || int(id) >= len(v.tokens) {
		return ""
	}
	return v.tokens[id]
}

// Type is a token's type (TypeNormal, TypeControl, …).
func (v *Vocab) Type(id int32) int32 {
	if id < 0 || int(id) >= len(v.types) {
		return TypeUndefined
	}
	return v.types[id]
}

// ID looks a token's text up.
func (v *Vocab) ID(text string) (int32, bool) {
	id, ok := v.toID[text]
	return id, ok
}

// fragment is a run of raw text, or a special token found in it.
type fragment struct {
	text  string
	token int32 // -1 for text
}

// partition splits text around the special tokens it contains, longest
// first; control and unknown tokens only when parseSpecial.
func (v *Vocab) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{text: text, token: -1}}
	for _, id := range v.special {
		t := v.types[id]
		if !parseSpecial && (t == TypeControl || t == TypeUnknown) {
			continue
		}
		s := v.tokens[id]
		var out []fragment
		for _, f := range frags {
			if f.token >= 0 || !strings.Contains(f.text, s) {
				out = append(out, f)
				continue
			}
			rest := f.text
			for {
				i := strings.Index(rest, s)
				if i < 0 {
					if rest != "" {
						out = append(out, fragment{text: rest, token: -1})
					}
					break
				}
				left := rest[:i]
				if v.lstrip[id] {
					left = strings.TrimRight(left, " \t\n\v\f\r")
				}
				if left != "" {
					out = append(out, fragment{text: left, token: -1})
				}
				out = append(out, fragment{token: id})
				rest = rest[i+len(s):]
				if v.rstrip[id] {
					rest = strings.TrimLeft(rest, " \t\n\v\f\r")
				}
			}
		}
		frags = out
	}
	return frags
}

// Encode tokenizes text. addSpecial adds BOS (and EOS) as the vocabulary
// asks; parseSpecial turns the text of control tokens into those tokens
// (user-defined tokens always are).
func (v *Vocab) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var out []int32
	if addSpecial && v.addBOS {
		out = append(out, v.bos)
	}
	var frags []fragment
	if text != "" {
		frags = v.partition(text, parseSpecial)
	}
	prevSpecial := true
	for _, f := range frags {
		if f.token >= 0 {
			out = append(out, f.token)
			prevSpecial = true
			continue
		}
		s := f.text
		switch v.kind {
		case spm:
			if v.addSpacePrefix && prevSpecial {
				s = " " + s
			}
			out = v.spm(escape(s), out)
		case bpe:
			if v.escapeSpaces {
				s = escape(s)
			}
			var err error
			if out, err = v.bpe(s, out); err != nil {
				return nil, err
			}
		}
		prevSpecial = false
	}
	if addSpecial && v.addEOS {
		out = append(out, v.eos)
	}
	return out, nil
}

func escape(s string) string { return strings.ReplaceAll(s, " ", "\u2581") }

// byteToken is SentencePiece's byte fallback: <0xNN>, else the byte itself
// as a token; -1 when neither exists.
func (v *Vocab) byteToken(b byte) int32 {
	if id, ok := v.toID[fmt.Sprintf("<0x%02X>", b)]; ok {
		return id
	}
	if id, ok := v.toID[string([]byte{b})]; ok {
		return id
	}
	return -1
}

// Piece is the text a token stands for, as llama.cpp's token_to_piece
// gives it: control and unknown tokens only when special; ▁ as space; byte
// tokens as their byte; BPE byte-level characters decoded to bytes.
func (v *Vocab) Piece(id int32, special bool) []byte {
	if id < 0 || int(id) >= len(v.tokens) {
		return nil
	}
	t, text := v.types[id], v.tokens[id]
	switch t {
	case TypeControl, TypeUnknown:
		if !special {
			return nil
		}
		return []byte(text)
	case TypeUserDefined:
		return []byte(text)
	case TypeNormal:
		if v.kind == spm || v.escapeSpaces {
			return []byte(strings.ReplaceAll(text, "\u2581", " "))
		}
		return decodeBytes(text)
	case TypeByte:
		if len(text) == 6 && strings.HasPrefix(text, "<0x") && text[5] == '>' {
			if b, err := strconv.ParseUint(text[3:5], 16, 8); err == nil {
				return []byte{byte(b)}
			}
		}
		return nil
	}
	return nil // unused, undefined
}

// Decode turns ids back into text as llama.cpp's detokenize does:
// removeSpecial drops a leading BOS and a trailing EOS the vocabulary adds;
// renderSpecial writes control tokens' text; SentencePiece's leading
// space is removed; BPE vocabularies that ask for it clean spaces before
// punctuation. Invalid UTF-8 (a character split across tokens) is kept.
func (v *Vocab) Decode(ids []int32, removeSpecial, renderSpecial bool) string {
	removeSpace := v.addSpacePrefix
	if removeSpecial && v.addBOS && len(ids) > 0 && ids[0] == v.bos {
		removeSpace = false
		ids = ids[1:]
	}
	if removeSpecial && v.addEOS && len(ids) > 0 && ids[len(ids)-1] == v.eos {
		ids = ids[:len(ids)-1]
	}
	var b []byte
	for _, id := range ids {
		p := v.Piece(id, renderSpecial)
		if removeSpace && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		removeSpace = false
		b = append(b, p...)
	}
	if v.cleanSpaces {
		b = cleanSpaces(b)
	}
	return string(b)
}

// cleanSpaces is llama.cpp's clean_up_tokenization: " ?", " !", " .", " ,"
// lose their space, " ' " its spaces, and " 's", " 'm", " 're", " 've"
// their space.
func cleanSpaces(t []byte) []byte {
	out := t[:0:0]
	for i, x := range t {
		if i > 0 && t[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') && len(out) > 0 {
			out = out[:len(out)-1]
		}
		out = append(out, x)
	}
	t, out = out, nil
	for i := 0; i < len(t); i++ {
		x := t[i]
		if x == '\'' && i > 0 && i+1 < len(t) && t[i-1] == ' ' && t[i+1] == ' ' && len(out) > 0 {
			out = out[:len(out)-1]
			out = append(out, x)
			i++ // the next space goes too
			continue
		}
		out = append(out, x)
	}
	t, out = out, nil
	for i, x := range t {
		if i > 0 && t[i-1] == ' ' && x == '\'' && i+1 < len(t) && len(out) > 0 {
			x1 := t[i+1]
			switch {
			case x1 == 's' || x1 == 'm':
				out = out[:len(out)-1]
			case i+2 < len(t) && (x1 == 'r' && t[i+2] == 'e' || x1 == 'v' && t[i+2] == 'e'):
				out = out[:len(out)-1]
			}
		}
		out = append(out, x)
	}
	return out
}

// ErrTooLong is returned for a text whose pre-tokenization would not end.
var ErrTooLong = errors.New("text too long to pre-tokenize")

// validRunes reports whether s is valid UTF-8 (the BPE path works on
// runes; invalid bytes become U+FFFD there, as in llama.cpp's decoder).
func validRunes(s string) bool { return utf8.ValidString(s) }
