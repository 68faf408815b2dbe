package modeltest

import (
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/model"
)

// A generated file reads back with the shape it was generated with, and
// its tokenizer round-trips text (SentencePiece-style: with the leading
// space it adds).
func TestGenerateRead(t *testing.T) {
	o := Family(t, model.Presets["tiny"], "qwen3")
	path := Generate(t, "m.gguf", o)
	f, cfg := Read(t, path)
	if cfg.Layers != o.Layers || cfg.Vocab != o.Vocab || cfg.Arch != "qwen3" || len(f.Tensors) == 0 {
		t.Fatalf("read %d layers, vocab %d, arch %q, %d tensors; generated %d layers, vocab %d as qwen3", cfg.Layers, cfg.Vocab, cfg.Arch, len(f.Tensors), o.Layers, o.Vocab)
	}
	tok := Tokenizer(t, path)
	ids, err := tok.Encode("hello world", false)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := tok.Decode(ids); err != nil || strings.TrimPrefix(s, " ") != "hello world" {
		t.Fatalf("decode(encode(%q)) = %q, %v", "hello world", s, err)
	}
}
