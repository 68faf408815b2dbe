// Package vocab tokenizes and detokenizes text with a GGUF model's
// vocabulary exactly as llama.cpp does (its llama-vocab.cpp is the
// reference; this is a port of its logic, not of its code): SentencePiece
// ("llama": score-ordered bigram merges over characters, a space prefix,
// ▁ for spaces, byte fallback), byte-level BPE ("gpt2": the pre-tokenizer
// regexes of every tokenizer.ggml.pre llama.cpp's test vocabularies use,
// or Kimi K2's hand-written split, then rank-ordered merges) and Gemma 4's SentencePiece-style BPE
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

	// custom is a hand-written split that runs before the regexes, as
	// llama.cpp's unicode_regex_split_custom does for kimi-k2.
	custom func(runes []rune, lo, hi int, out [][2]int) [][2]int

	special []int32 // control, user-defined and unknown tokens, longest first
	eog     []int32 // tokens that end generation
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
