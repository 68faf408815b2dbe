package model

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

func genTiny(t *testing.T, o GenOptions) (string, *gguf.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := Generate(path, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, f
}

func TestGenerateAndConfig(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2"} {
		o := Presets["tiny"]
		o.Arch, o.Type = arch, "Q8_0"
		path, f := genTiny(t, o)
		c, err := FromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		if c.Arch != arch || c.Layers != 4 || c.Dim != 64 || c.FFDim != 192 || c.Heads != 4 || c.KVHeads != 2 || c.HeadDim != 16 ||
			c.Vocab != 512 || c.ContextLen != 512 || c.FileType != "Q8_0" || c.TiedOutput || c.QKVBias != (arch == "qwen2") || c.RopeNeoX != (arch == "qwen2") {
			t.Errorf("%s config %+v", arch, c)
		}
		size, _ := GenSize(o)
		st, _ := os.Stat(path)
		if uint64(st.Size()) < size {
			t.Errorf("file %d bytes, weights %d", st.Size(), size)
		}
		// Deterministic: the same options give the same bytes.
		again := filepath.Join(t.TempDir(), "again.gguf")
		if err := Generate(again, o); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(path)
		b, _ := os.ReadFile(again)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two generations differ", arch)
		}
	}
}

// An architecture Orrery does not run is refused, listing those it runs;
// the newest families people ask for (notYet) say what keeps them out.
func TestUnsupportedArchitecture(t *testing.T) {
	_, f := genTiny(t, Presets["tiny"])
	for _, c := range []struct{ arch, why string }{
		{"mamba", ""},
		{"qwen35", "recurrent state"},
		{"qwen3next", "recurrent state"},
		{"gemma4", "sharing an earlier layer's KV cache"},
		{"deepseek4", "compressed KV cache"},
	} {
		_, err := FromGGUF(f.With("general.architecture", c.arch))
		if err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `"`+c.arch+`"`) ||
			!strings.Contains(err.Error(), "supported: llama, qwen2, qwen3, qwen3moe") || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: err = %v, want ErrUnsupported naming it, the supported list and %q", c.arch, err, c.why)
		}
		if c.why == "" && strings.Contains(fmt.Sprint(err), "not yet") {
			t.Errorf("%s: err = %v: a reason for an architecture nobody asked for", c.arch, err)
		}
	}
}

func TestGenOptionErrors(t *testing.T) {
	for _, c := range []struct {
		o    GenOptions
		want string
	}{
		{GenOptions{Layers: 0, Dim: 64, Heads: 4, Vocab: 512}, "layers 0"},
		{GenOptions{Layers: 1, Dim: 65, Heads: 4, Vocab: 512}, "dim 65"},
		{GenOptions{Layers: 1, Dim: 64, Heads: 3, Vocab: 512}, "3 heads"},
		{GenOptions{Layers: 1, Dim: 64, Heads: 4, KVHeads: 3, Vocab: 512}, "3 kv heads"},
		{GenOptions{Layers: 1, Dim: 64, Heads: 4, Vocab: 10}, "vocab 10"},
		{GenOptions{Layers: 1, Dim: 64, Heads: 4, Vocab: 512, Type: "Q2_K"}, `type "Q2_K"`},
		{GenOptions{Arch: "gpt2", Layers: 1, Dim: 64, Heads: 4, Vocab: 512}, `arch "gpt2"`},
	} {
		if err := Generate(filepath.Join(t.TempDir(), "x.gguf"), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.want)
		}
	}
}

func TestTokenizerAndTemplate(t *testing.T) {
	o := Presets["tiny"]
	o.Vocab = 4096 // room for letter pairs and triples: merges happen
	_, f := genTiny(t, o)
	tok, err := tokenizer.New(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hello world", "the orrery cluster", "ünïcödé ✓ 123", "x"} {
		ids, err := tok.Encode(s, true)
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] != genBOS {
			t.Errorf("%q: no BOS first: %v", s, ids)
		}
		back, err := tok.Decode(ids[1:])
		if err != nil || strings.TrimPrefix(back, " ") != s {
			t.Errorf("%q → %v → %q (%v)", s, ids, back, err)
		}
	}
	ids, _ := tok.Encode("hello world", false)
	if len(ids) > 7 { // 11 bytes
		t.Errorf("hello world took %d tokens: %v (pieces not used)", len(ids), ids)
	}
	prompt, err := tok.Chat([]runnerapi.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}, tokenizer.ChatOptions{})
	want := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	if err != nil || prompt != want {
		t.Errorf("chat = %q, %v", prompt, err)
	}
	ids, _ = tok.Encode(prompt, false)
	if ids[0] != genImStart || !tok.EndsGeneration(genImEnd) || tok.EndsGeneration(genImStart) {
		t.Errorf("special tokens: %v", ids[:3])
	}
}
