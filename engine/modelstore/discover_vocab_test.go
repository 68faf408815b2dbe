package modelstore

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

// A model whose vocabulary is inconsistent is listed with the reason,
// naming the key, and not offered as servable.
func TestScanRefusesBadVocabulary(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src.gguf")
	if err := model.Generate(src, model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	kvs := append([]gguf.KV(nil), f.KV...)
	for i := range kvs {
		if kvs[i].Key == "tokenizer.ggml.scores" {
			kvs[i].Value = []float32{1, 2, 3}
		}
	}
	var ts []gguf.WriteTensor
	for _, ti := range f.Tensors {
		off, size := f.DataOffset+int64(ti.Offset), int64(ti.Size)
		ts = append(ts, gguf.WriteTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: func(w io.Writer) error {
			_, err := io.Copy(w, io.NewSectionReader(in, off, size))
			return err
		}})
	}
	dir := t.TempDir()
	if err := gguf.WriteFile(filepath.Join(dir, "bad-vocab.gguf"), kvs, ts); err != nil {
		t.Fatal(err)
	}
	s := &Scanner{Dirs: Dirs{Orrery: dir}}
	ms := s.Scan()
	if len(ms) != 1 || !strings.Contains(ms[0].Error, "tokenizer.ggml.scores: want 512 float32 scores, got 3") {
		t.Fatalf("scan: %+v", ms)
	}
}
