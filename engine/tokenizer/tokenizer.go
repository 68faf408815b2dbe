// Package tokenizer is a model's text side, as its GGUF metadata describes
// it: the vocabulary (engine/vocab, which agrees with llama.cpp) that
// encodes and decodes tokens, the chat template (engine/chattmpl) that
// renders a conversation into a prompt, the template's tool-call and
// reasoning conventions (engine/chatfmt), and the vocabulary as
// constrained sampling sees it (engine/grammar). It is apart from
// engine/model so that what needs only a model's shape (engine/placement,
// engine/backend) does not pull in the Jinja interpreter.
package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/orrery-cluster/orrery/engine/chatfmt"
	"github.com/orrery-cluster/orrery/engine/chattmpl"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/vocab"
)

// ChatOptions are the template's other inputs: the tools (OpenAI's tools
// array) and keyword arguments such as enable_thinking.
type ChatOptions struct {
	Tools  json.RawMessage
	Kwargs map[string]any
}

// Tokenizer encodes and decodes text with a model's vocabulary (from its
// GGUF metadata, through engine/vocab, which agrees with llama.cpp) and
// renders its chat template. It is safe for concurrent use.
type Tokenizer struct {
	v        *vocab.Vocab
	template *chattmpl.Template
	bos, eos string
	// format and thinks are the template's tool-call and reasoning
	// conventions.
	format chatfmt.Format
	thinks bool

	grammarOnce  sync.Once
	grammarVocab *grammar.Vocab
}

// New builds the tokenizer the model's metadata describes:
// SentencePiece ("llama"), byte-level BPE ("gpt2", with the pre-tokenizer
// tokenizer.ggml.pre names) or Gemma 4's ("gemma4"). An inconsistent
// vocabulary, or a chat template Orrery cannot render, is an error naming
// the key or the construct.
func New(f *gguf.File) (*Tokenizer, error) {
	v, err := vocab.New(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t := &Tokenizer{v: v, bos: v.Text(v.BOS()), eos: v.Text(v.EOS())}
	if src := f.String("tokenizer.chat_template", ""); src != "" {
		tmpl, err := chattmpl.Compile(src) // an unsupported construct fails here, named
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		t.template = tmpl
		t.format, t.thinks = chatfmt.Detect(src)
	}
	return t, nil
}

// Encode tokenizes s as llama.cpp's server tokenizes a prompt: the text
// of special tokens becomes those tokens; addSpecial adds BOS (and EOS)
// as the model asks.
func (t *Tokenizer) Encode(s string, addSpecial bool) ([]int32, error) {
	return t.v.Encode(s, addSpecial, true)
}

// Decode turns ids into text as llama.cpp's server does (its pieces
// concatenated, special tokens written out): bytes of a character split
// across tokens come out as they are.
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	var b []byte
	for _, id := range ids {
		if id < 0 || int(id) >= t.v.Len() {
			return "", fmt.Errorf("token %d outside the %d-token vocabulary", id, t.v.Len())
		}
		b = append(b, t.v.Piece(id, true)...)
	}
	return string(b), nil
}

// Detokenize is llama.cpp's llama_detokenize: removeSpecial drops the
// BOS/EOS the model adds, renderSpecial writes control tokens, and
// SentencePiece's leading space is removed.
func (t *Tokenizer) Detokenize(ids []int32, removeSpecial, renderSpecial bool) string {
	return t.v.Decode(ids, removeSpecial, renderSpecial)
}

// StripBOS is ids without a leading BOS.
func (t *Tokenizer) StripBOS(ids []int32) []int32 {
	if len(ids) > 0 && t.v.BOS() >= 0 && ids[0] == t.v.BOS() {
		return ids[1:]
	}
	return ids
}

// EndsGeneration reports whether id is an end-of-generation token (EOS,
// end of turn and the others llama.cpp recognises).
func (t *Tokenizer) EndsGeneration(id int32) bool { return t.v.EndsGeneration(id) }

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return t.v.Len() }

// ChatFormat is how the model's template writes tool calls, and whether
// it writes reasoning in <think> blocks.
func (t *Tokenizer) ChatFormat() (chatfmt.Format, bool) { return t.format, t.thinks }

// Chat renders messages with the model's chat template, ending with the
// assistant's turn opened. A model without a template gets the messages
// joined by newlines.
func (t *Tokenizer) Chat(msgs []runnerapi.Message, o ChatOptions) (string, error) {
	if t.template == nil {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Content)
			b.WriteString("\n")
		}
		return b.String(), nil
	}
	vars := chattmpl.Context(nil, true, t.bos, t.eos)
	// Through JSON, so that templates see objects with their keys in
	// order, as Hugging Face passes them.
	raw, err := json.Marshal(msgs)
	if err != nil {
		return "", fmt.Errorf("chat messages: %w", err)
	}
	if vars["messages"], err = chattmpl.DecodeJSON(raw); err != nil {
		return "", fmt.Errorf("chat messages: %w", err)
	}
	if len(o.Tools) > 0 {
		if vars["tools"], err = chattmpl.DecodeJSON(o.Tools); err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
	}
	for k, v := range o.Kwargs {
		switch k {
		case "messages", "tools", "add_generation_prompt", "bos_token", "eos_token":
			continue // the request's own; keyword arguments do not replace them
		}
		vars[k] = chattmpl.FromGo(v)
	}
	out, err := t.template.Render(vars)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// Special reports whether id is a control, unknown or unused token, whose
// text is not part of generated output.
func (t *Tokenizer) Special(id int32) bool {
	switch t.v.Type(id) {
	case vocab.TypeControl, vocab.TypeUnknown, vocab.TypeUnused, vocab.TypeUndefined:
		return true
	}
	return false
}

// GrammarVocab is the vocabulary as constrained sampling sees it: each
// token's text as it appears in output (none for special tokens), and the
// end-of-generation tokens. Built on first use, then shared.
func (t *Tokenizer) GrammarVocab() *grammar.Vocab {
	t.grammarOnce.Do(func() {
		t.grammarVocab = grammar.NewVocab(t.v.Len(), func(id int32) grammar.Token {
			if t.v.EndsGeneration(id) {
				return grammar.Token{EOG: true}
			}
			if t.Special(id) {
				return grammar.Token{}
			}
			return grammar.Token{Bytes: t.v.Piece(id, true)}
		})
	})
	return t.grammarVocab
}
