package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ollama/ollama/tokenizer"

	"github.com/orrery-cluster/orrery/engine/chattmpl"
	"github.com/orrery-cluster/orrery/engine/gguf"
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Tokenizer encodes and decodes text with a model's vocabulary (from its
// GGUF metadata) and renders its chat template.
type Tokenizer struct {
	tok      tokenizer.Tokenizer
	vocab    *tokenizer.Vocabulary
	eog      []int32 // ids that end generation
	template *chattmpl.Template
	bos, eos string
}

// NewTokenizer builds the tokenizer the model's metadata describes:
// SentencePiece ("llama") or byte-level BPE ("gpt2", with the
// pre-tokenizer tokenizer.ggml.pre names).
func NewTokenizer(f *gguf.File) (*Tokenizer, error) {
	tokens := f.Strings("tokenizer.ggml.tokens")
	if len(tokens) == 0 {
		return nil, fmt.Errorf("no tokenizer.ggml.tokens in the model")
	}
	v := &tokenizer.Vocabulary{
		Values: tokens,
		Merges: f.Strings("tokenizer.ggml.merges"),
		AddBOS: f.Bool("tokenizer.ggml.add_bos_token", true),
		AddEOS: f.Bool("tokenizer.ggml.add_eos_token", false),
	}
	if s, ok := mustGet[[]float32](f, "tokenizer.ggml.scores"); ok {
		v.Scores = s
	}
	if t, ok := mustGet[[]int32](f, "tokenizer.ggml.token_type"); ok {
		v.Types = t
	}
	if len(v.Scores) == 0 {
		v.Scores = make([]float32, len(tokens))
	}
	if len(v.Types) == 0 {
		v.Types = slices.Repeat([]int32{tokenizer.TOKEN_TYPE_NORMAL}, len(tokens))
	}
	if len(v.Scores) != len(tokens) || len(v.Types) != len(tokens) {
		return nil, fmt.Errorf("tokenizer: %d tokens, %d scores, %d types", len(tokens), len(v.Scores), len(v.Types))
	}
	id := func(key string, def int64) int64 {
		if _, ok := f.Get(key); !ok {
			return def
		}
		return int64(f.Uint(key, uint64(len(tokens))))
	}
	bos, eos := id("tokenizer.ggml.bos_token_id", -1), id("tokenizer.ggml.eos_token_id", -1)
	for _, x := range []int64{bos, eos} {
		if x >= int64(len(tokens)) {
			return nil, fmt.Errorf("tokenizer: special token id %d outside the %d-token vocabulary", x, len(tokens))
		}
	}
	t := &Tokenizer{vocab: v}
	if bos >= 0 {
		v.BOS = []int32{int32(bos)}
		t.bos = tokens[bos]
	} else {
		v.AddBOS = false
	}
	if eos >= 0 {
		v.EOS = []int32{int32(eos)}
		t.eos = tokens[eos]
		t.eog = append(t.eog, int32(eos))
	}
	// End-of-turn tokens of common templates also end generation.
	for i, s := range tokens {
		if v.Types[i] == tokenizer.TOKEN_TYPE_CONTROL && slices.Contains([]string{"<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "</s>", "<end_of_turn>"}, s) && !slices.Contains(t.eog, int32(i)) {
			t.eog = append(t.eog, int32(i))
		}
	}
	switch m := f.String("tokenizer.ggml.model", "llama"); m {
	case "llama":
		t.tok = tokenizer.NewSentencePiece(v)
	case "gpt2":
		t.tok = tokenizer.NewBytePairEncoding(v, pretokenizer(f.String("tokenizer.ggml.pre", "default"))...)
	default:
		return nil, fmt.Errorf("tokenizer model %q: want llama (SentencePiece) or gpt2 (BPE)", m)
	}
	if src := f.String("tokenizer.chat_template", ""); src != "" {
		tmpl, err := chattmpl.Compile(src) // an unsupported construct fails here, named
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		t.template = tmpl
	}
	return t, nil
}

func mustGet[T any](f *gguf.File, key string) (T, bool) {
	var zero T
	v, ok := f.Get(key)
	if !ok {
		return zero, false
	}
	x, ok := v.(T)
	return x, ok
}

// pretokenizer returns the split regexes for a BPE pre-tokenizer name (as
// llama.cpp names them).
func pretokenizer(name string) []string {
	switch name {
	case "qwen2":
		return []string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	case "default", "gpt2":
		return nil
	default: // llama-bpe (Llama 3) and the like
		return []string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	}
}

// Encode tokenizes s; addSpecial adds the BOS token if the model wants it.
func (t *Tokenizer) Encode(s string, addSpecial bool) ([]int32, error) {
	return t.tok.Encode(s, addSpecial)
}

// Decode turns ids back into text (bytes of a character split across
// tokens come out as they are).
func (t *Tokenizer) Decode(ids []int32) (string, error) { return t.tok.Decode(ids) }

// EndsGeneration reports whether id is an end-of-generation token.
func (t *Tokenizer) EndsGeneration(id int32) bool { return slices.Contains(t.eog, id) }

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.vocab.Values) }

// Chat renders messages with the model's chat template, ending with the
// assistant's turn opened. A model without a template gets the messages
// joined by newlines.
func (t *Tokenizer) Chat(msgs []Message) (string, error) {
	if t.template == nil {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Content)
			b.WriteString("\n")
		}
		return b.String(), nil
	}
	ms := make([]chattmpl.Message, len(msgs))
	for i, m := range msgs {
		ms[i] = chattmpl.Message{Role: m.Role, Content: m.Content}
	}
	out, err := t.template.Render(chattmpl.Context(ms, true, t.bos, t.eos))
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// Special reports whether id is a control or unused token, whose text is
// not part of generated output.
func (t *Tokenizer) Special(id int32) bool {
	if id < 0 || int(id) >= len(t.vocab.Types) {
		return true
	}
	switch t.vocab.Types[id] {
	case tokenizer.TOKEN_TYPE_CONTROL, tokenizer.TOKEN_TYPE_UNUSED:
		return true
	}
	return false
}
