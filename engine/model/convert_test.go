package model

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// writeTrained writes a safetensors file as models/kjv/train.py does, for
// the tiny llama shape: every tensor of genTensors (values i/1000 + its
// index), the shape and genVocab's vocabulary in the metadata. edit may
// change the header before it is written.
func writeTrained(t *testing.T, edit func(hdr map[string]any)) (string, GenOptions) {
	t.Helper()
	o := GenOptions{Arch: "llama", Layers: 2, Dim: 64, FFDim: 96, Heads: 4, Vocab: 512, ContextLen: 64, Type: "F32"}
	if err := o.fill(); err != nil {
		t.Fatal(err)
	}
	toks, scores, types := genVocab(o.Vocab)
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	hdr := map[string]any{"__metadata__": map[string]string{
		"arch": "llama", "layers": "2", "dim": "64", "heads": "4", "ff": "96", "context_length": "64",
		"tokens": js(toks), "scores": js(scores), "token_types": js(types), "name": "test", "heldout_loss": "1.0",
	}}
	var data []byte
	for k, wt := range genTensors(o) {
		shape := make([]uint64, len(wt.Dims))
		n := 1
		for j, d := range wt.Dims {
			shape[len(shape)-1-j] = d
			n *= int(d)
		}
		begin := len(data)
		for i := range n {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(i)/1000+float32(k)))
		}
		hdr[wt.Name] = map[string]any{"dtype": "F32", "shape": shape, "data_offsets": []int{begin, len(data)}}
	}
	if edit != nil {
		edit(hdr)
	}
	h, _ := json.Marshal(hdr)
	file := append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...)
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, append(file, data...), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, o
}

func TestConvert(t *testing.T) {
	src, o := writeTrained(t, nil)
	dst := filepath.Join(t.TempDir(), "m.gguf")
	if err := Convert(src, dst, "F32"); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokenizer.New(f); err != nil {
		t.Fatalf("tokenizer: %v", err)
	}
	if got := f.String("tokenizer.chat_template", ""); got != ContinueTemplate {
		t.Errorf("template %q", got)
	}
	if got := f.String("general.name", ""); got != "test-F32" {
		t.Errorf("name %q", got)
	}
	want, _, _ := genVocab(o.Vocab)
	if got := f.Strings("tokenizer.ggml.tokens"); !slices.Equal(got, want) {
		t.Errorf("tokens differ")
	}
	raw, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	// Each tensor's values come through in order: element i of tensor k
	// is i/1000 + k.
	for k, wt := range genTensors(o) {
		ti, ok := f.Tensor(wt.Name)
		if !ok || !slices.Equal(ti.Dims, wt.Dims) || ti.Type != gguf.F32 {
			t.Fatalf("%s: %+v", wt.Name, ti)
		}
		b := raw[f.DataOffset+int64(ti.Offset):]
		for _, i := range []int{0, int(ti.Elements()) - 1} {
			got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			if want := float32(i)/1000 + float32(k); got != want {
				t.Fatalf("%s[%d] = %v, want %v", wt.Name, i, got, want)
			}
		}
	}
	// Quantized: the matrices take the type, the norms stay F32.
	if err := Convert(src, dst, "Q8_0"); err != nil {
		t.Fatal(err)
	}
	if f, err = gguf.ReadFile(dst); err != nil {
		t.Fatal(err)
	}
	if a, _ := f.Tensor("blk.0.attn_q.weight"); a.Type != gguf.Q8_0 {
		t.Errorf("attn_q is %v", a.Type)
	}
	if n, _ := f.Tensor("blk.0.attn_norm.weight"); n.Type != gguf.F32 {
		t.Errorf("attn_norm is %v", n.Type)
	}
}

func TestConvertRefuses(t *testing.T) {
	meta := func(k, v string) func(map[string]any) {
		return func(h map[string]any) { h["__metadata__"].(map[string]string)[k] = v }
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		typ  string
		want string
	}{
		{"arch", meta("arch", "gpt2"), "F32", `arch "gpt2"`},
		{"layers", meta("layers", "x"), "F32", `"layers"`},
		{"tokens", meta("tokens", "{"), "F32", `"tokens"`},
		{"counts", meta("scores", "[1]"), "F32", "512 tokens, 1 scores"},
		{"missing", func(h map[string]any) { delete(h, "output.weight") }, "F32", `no tensor "output.weight"`},
		{"extra", func(h map[string]any) {
			h["rogue"] = map[string]any{"dtype": "F32", "shape": []int{0}, "data_offsets": []int{0, 0}}
		}, "F32", `"rogue" is not part`},
		{"shape", func(h map[string]any) { meta("dim", "96")(h); meta("heads", "3")(h) }, "F32", "has shape"},
		{"type", nil, "Q5_K", `type "Q5_K"`},
	} {
		src, _ := writeTrained(t, c.edit)
		err := Convert(src, filepath.Join(t.TempDir(), "m.gguf"), c.typ)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one naming %s", c.name, err, c.want)
		}
	}
}

// FuzzConvertOptions: any metadata gives options that pass fill() or an
// error, never a panic.
func FuzzConvertOptions(f *testing.F) {
	toks, scores, types := genVocab(300)
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	f.Add("2", "64", "4", "96", "64", js(toks), js(scores), js(types))
	f.Add("x", "-1", "0", "", "1e9", "[", "[]", "null")
	f.Fuzz(func(t *testing.T, layers, dim, heads, ff, ctx, tokens, scores, types string) {
		meta := map[string]string{"arch": "llama", "layers": layers, "dim": dim, "heads": heads, "ff": ff, "context_length": ctx,
			"tokens": tokens, "scores": scores, "token_types": types}
		o, v, err := convertOptions(meta, "F32")
		if err != nil {
			return
		}
		if o.Vocab != len(v.Tokens) || v.EOS < 0 || v.EOS >= len(v.Tokens) {
			t.Fatalf("options %+v for %d tokens, EOS %d", o, len(v.Tokens), v.EOS)
		}
	})
}
