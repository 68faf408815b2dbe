package vocab

import (
	"fmt"
	"strings"
	"testing"
)

// kimiPieces is what splitKimiK2 makes of s.
func kimiPieces(s string) []string {
	runes := []rune(s)
	var out []string
	for _, p := range splitKimiK2(runes, 0, len(runes), nil) {
		out = append(out, string(runes[p[0]:p[1]]))
	}
	return out
}

// The kimi-k2 split, rule by rule, as llama.cpp's
// unicode_regex_split_custom_kimi_k2 makes it (TestMatchesLlamaCpp holds
// the whole tokenizer to llama.cpp itself).
func TestSplitKimiK2(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"我爱北京Hello世界", []string{"我爱北京", "Hello", "世界"}},
		{" 中文 text", []string{" ", "中文", " text"}},
		// No case rule in llama.cpp's handler: camel case is one word.
		{"HelloWorld's camelCase", []string{"HelloWorld's", " camelCase"}},
		{"they'RE DON'T it's we'Ve o'clock", []string{"they'RE", " DON'T", " it's", " we'Ve", " o", "'clock"}},
		{"1234567 12ab", []string{"123", "456", "7", " ", "12", "ab"}},
		{"!!!??? x", []string{"!!!???", " x"}},
		{"ok.\n\nNext", []string{"ok", ".\n\n", "Next"}},
		{"a\n\n  b", []string{"a", "\n\n", " ", " b"}},
		{"x  ", []string{"x", "  "}},
		{"x   y", []string{"x", "  ", " y"}},
		{"🦙!x", []string{"🦙!", "x"}},
		// A combining mark is no letter: it leads the next word.
		{"e\u0301x", []string{"e", "\u0301x"}},
		{"", nil},
	} {
		if got := kimiPieces(c.in); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

// Kimi K2's special tokens end generation as in llama.cpp: [EOS], [EOT]
// and <|im_end|>; [PAD] is a control token that llama.cpp takes for its
// fill-in-the-middle pad, which ends generation too.
func TestKimiK2Specials(t *testing.T) {
	f := bpeFile("kimi-k2")
	toks := append([]string(nil), f.KV[2].Value.([]string)...)
	types := append([]int32(nil), f.KV[3].Value.([]int32)...)
	for _, s := range []string{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "[EOT]", "[PAD]", "<|im_middle|>"} {
		toks, types = append(toks, s), append(types, TypeNormal) // as if the file typed them wrongly
	}
	f = set(set(f, "tokenizer.ggml.tokens", toks), "tokenizer.ggml.token_type", types)
	f = set(f, "tokenizer.ggml.eos_token_id", uint32(len(toks)-6))
	v, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"[EOS]", "[EOT]", "<|im_end|>", "[PAD]"} {
		id, _ := v.ID(s)
		if !v.EndsGeneration(id) || v.Type(id) != TypeControl {
			t.Errorf("%s: ends generation %v, type %d; want true, control", s, v.EndsGeneration(id), v.Type(id))
		}
	}
	for _, s := range []string{"[BOS]", "<|im_user|>", "<|im_middle|>"} {
		if id, _ := v.ID(s); v.EndsGeneration(id) {
			t.Errorf("%s ends generation", s)
		}
	}
}

// The pieces of any text are non-empty, in order, and cover it.
func FuzzSplitKimiK2(f *testing.F) {
	for _, s := range []string{"我爱北京Hello世界", "they'RE DON'T", "1234567", "!!!\r\n\r\n", "  \t\n x  ", "e\u0301x🦙👨\u200d👩", "'", "a'", "a'l", "\xff\xfe日", strings.Repeat("ab 1", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		runes := []rune(s)
		end := 0
		for _, p := range splitKimiK2(runes, 0, len(runes), nil) {
			if p[0] != end || p[1] <= p[0] {
				t.Fatalf("%q: piece %v after %d", s, p, end)
			}
			end = p[1]
		}
		if end != len(runes) {
			t.Fatalf("%q: pieces end at %d of %d runes", s, end, len(runes))
		}
	})
}
