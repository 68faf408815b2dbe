package vocab

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// spmFile is a small SentencePiece vocabulary: specials, the 256 byte
// tokens, ▁, letters and a few words.
func spmFile() *gguf.File {
	var toks []string
	var scores []float32
	var types []int32
	add := func(s string, score float32, typ int32) {
		toks, scores, types = append(toks, s), append(scores, score), append(types, typ)
	}
	add("<unk>", 0, TypeUnknown)
	add("<s>", 0, TypeControl)
	add("</s>", 0, TypeControl)
	add("<|im_start|>", 0, TypeControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, TypeByte)
	}
	add("\u2581", -1, TypeNormal)
	for c := 'a'; c <= 'z'; c++ {
		add(string(c), -2, TypeNormal)
	}
	for _, w := range []string{"\u2581the", "\u2581cat", "he", "at", "\u2581c", "\u2581t"} {
		add(w, float32(len(w)), TypeNormal)
	}
	return &gguf.File{KV: []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: toks},
		{Key: "tokenizer.ggml.scores", Value: scores},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
	}}
}

// bpeFile is a small byte-level BPE vocabulary: the 256 byte characters,
// two merges and a control token.
func bpeFile(pre string) *gguf.File {
	var toks []string
	for b := 0; b < 256; b++ {
		toks = append(toks, string(byteRune[b]))
	}
	sp := string(byteRune[' '])
	toks = append(toks, "he", sp+"t", sp+"the", "<|endoftext|>")
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = TypeNormal
	}
	types[len(types)-1] = TypeControl
	return &gguf.File{KV: []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Value: pre},
		{Key: "tokenizer.ggml.tokens", Value: toks},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.merges", Value: []string{"h e", sp + " t", sp + "t he"}},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(len(toks) - 1)},
	}}
}

func set(f *gguf.File, key string, v any) *gguf.File {
	kv := append([]gguf.KV(nil), f.KV...)
	for i := range kv {
		if kv[i].Key == key {
			kv[i].Value = v
			return &gguf.File{KV: kv}
		}
	}
	return &gguf.File{KV: append(kv, gguf.KV{Key: key, Value: v})}
}

func TestEncodeDecode(t *testing.T) {
	spm, err := New(spmFile())
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := spm.Encode("the cat", true, false)
	want := []int32{1, spm.toID["\u2581the"], spm.toID["\u2581cat"]}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("SPM the cat = %v, want %v", ids, want)
	}
	// llama.cpp keeps the space prefix when it removes BOS, and drops it
	// otherwise.
	if s := spm.Decode(ids, true, false); s != " the cat" {
		t.Errorf("SPM decode, BOS removed = %q", s)
	}
	if s := spm.Decode(ids[1:], false, false); s != "the cat" {
		t.Errorf("SPM decode = %q", s)
	}
	// Bytes without a piece fall back to <0xNN>.
	ids, _ = spm.Encode("é", false, false)
	if len(ids) != 3 || spm.tokens[ids[1]] != "<0xC3>" || spm.tokens[ids[2]] != "<0xA9>" {
		t.Errorf("SPM é = %v", ids)
	}
	// Control tokens are text unless parsed.
	if ids, _ := spm.Encode("<|im_start|>the", false, true); ids[0] != 3 {
		t.Errorf("parsed <|im_start|>: %v", ids)
	}
	if ids, _ := spm.Encode("<|im_start|>the", false, false); ids[0] == 3 {
		t.Errorf("unparsed <|im_start|> became the token: %v", ids)
	}

	bpe, err := New(bpeFile("qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	ids, _ = bpe.Encode("he the", false, false)
	if len(ids) != 2 || bpe.tokens[ids[0]] != "he" || bpe.tokens[ids[1]] != string(byteRune[' '])+"the" {
		t.Errorf("BPE he the = %v", ids)
	}
	if !bpe.EndsGeneration(bpe.toID["<|endoftext|>"]) {
		t.Error("<|endoftext|> does not end generation")
	}
}

// Bad vocabularies are refused with the key named.
func TestRefused(t *testing.T) {
	f := bpeFile("qwen2")
	toks, _ := f.KV[2].Value.([]string)
	big := append(append([]string(nil), toks...), strings.Repeat("x", 1<<20))
	for _, c := range []struct {
		f    *gguf.File
		want string
	}{
		{set(f, "tokenizer.ggml.merges", []string{"h e", "q z"}), `tokenizer.ggml.merges: merge 1 "q z" makes "qz", which is not a token`},
		{set(f, "tokenizer.ggml.merges", []string{"he"}), `tokenizer.ggml.merges: merge 0 "he" is not two tokens`},
		{set(f, "tokenizer.ggml.scores", []float32{1, 2}), "tokenizer.ggml.scores: want 260 float32 scores, got 2 float32s"},
		{set(f, "tokenizer.ggml.token_type", []int32{1}), "tokenizer.ggml.token_type: want 260 int32 types"},
		{set(f, "tokenizer.ggml.tokens", big), "tokenizer.ggml.tokens: token 260 is 1048576 bytes"},
		{set(f, "tokenizer.ggml.tokens", []string{}), "tokenizer.ggml.tokens: want a non-empty array"},
		{set(f, "tokenizer.ggml.eos_token_id", uint32(5000)), "tokenizer.ggml.eos_token_id: 5000 is outside the 260-token vocabulary"},
		{set(f, "tokenizer.ggml.pre", "mystery"), `tokenizer.ggml.pre: "mystery" is not supported`},
		{set(f, "tokenizer.ggml.model", "bert"), `tokenizer.ggml.model "bert" (WordPiece`},
		{set(spmFile(), "tokenizer.ggml.token_type", make([]int32, 292)), "want 293 int32 types"},
	} {
		if _, err := New(c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}

// Text comes back from its tokens: byte-level BPE keeps every byte;
// SentencePiece with byte fallback keeps valid UTF-8.
func TestRoundTrip(t *testing.T) {
	spm, _ := New(spmFile())
	bpe, _ := New(bpeFile("qwen2"))
	for _, s := range []string{"", " ", "the cat", "  two  spaces ", "tabs\tand\nnewlines\n", "Äpfel 🦙 日本", "\x00ctrl", "<|im_start|>x"} {
		ids, err := spm.Encode(s, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := spm.Decode(ids, false, false); got != s {
			t.Errorf("SPM %q → %v → %q", s, ids, got)
		}
		ids, err = bpe.Encode(s, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := bpe.Decode(ids, false, true); got != s {
			t.Errorf("BPE %q → %v → %q", s, ids, got)
		}
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"the cat", "<|im_start|>he<|endoftext|>", "\xff\xfe invalid", strings.Repeat("a", 5000), "  \n\t 42 !!!"} {
		f.Add(s, true, true)
	}
	spm, _ := New(spmFile())
	bpes := []*Vocab{}
	for _, pre := range []string{"qwen2", "llama-bpe", "gpt-2", "deepseek-llm", "falcon", "gemma4", "kimi-k2"} {
		v, err := New(bpeFile(pre))
		if err != nil {
			f.Fatal(err)
		}
		bpes = append(bpes, v)
	}
	f.Fuzz(func(t *testing.T, s string, addSpecial, parseSpecial bool) {
		ids, err := spm.Encode(s, false, parseSpecial)
		if err != nil {
			t.Fatal(err)
		}
		if !parseSpecial && utf8.ValidString(s) {
			if got := spm.Decode(ids, false, true); got != s {
				t.Errorf("SPM %q → %q", s, got)
			}
		}
		for _, v := range bpes {
			ids, err := v.Encode(s, addSpecial, parseSpecial)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if id < 0 || int(id) >= v.Len() {
					t.Fatalf("%s: id %d outside the vocabulary", v.pre, id)
				}
			}
			_ = v.Decode(ids, addSpecial, true)
		}
	})
}

// A Vocab is used by concurrent requests (the race detector checks this).
func TestConcurrentEncode(t *testing.T) {
	v, err := New(bpeFile("llama-bpe"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := v.Encode("he the  cat's 42", true, true)
	errs := make(chan string, 4)
	for range 4 {
		go func() {
			got, err := v.Encode("he the  cat's 42", true, true)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				errs <- fmt.Sprintf("%v (%v), want %v", got, err, want)
				return
			}
			errs <- ""
		}()
	}
	for range 4 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

// gpt-oss's <|end|> ends a message (its reasoning), not generation, where
// <|return|> and <|call|> are there (llama.cpp's rule); alone it ends
// generation (Phi-3's).
func TestHarmonyEndDoesNotEndGeneration(t *testing.T) {
	with := func(extra ...string) *Vocab {
		f := bpeFile("gpt-4o")
		toks := append([]string(nil), f.KV[2].Value.([]string)...)
		types := append([]int32(nil), f.KV[3].Value.([]int32)...)
		for _, s := range extra {
			toks, types = append(toks, s), append(types, TypeControl)
		}
		v, err := New(set(set(f, "tokenizer.ggml.tokens", toks), "tokenizer.ggml.token_type", types))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := with("<|return|>", "<|call|>", "<|end|>")
	for s, want := range map[string]bool{"<|return|>": true, "<|call|>": true, "<|end|>": false} {
		if id, _ := v.ID(s); v.EndsGeneration(id) != want {
			t.Errorf("gpt-oss %s ends generation: %v, want %v", s, !want, want)
		}
	}
	v = with("<|end|>")
	if id, _ := v.ID("<|end|>"); !v.EndsGeneration(id) {
		t.Error("Phi-3's <|end|> does not end generation")
	}
}
