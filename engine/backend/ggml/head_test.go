package ggml

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// BenchmarkHead is the 1b preset's output head (2048 × 32,000 Q8_0) in a
// decode step on one thread, whole and halved by vocabulary: what rank 0
// computes each step with the head on it alone, against what each of 2
// ranks would with it split. Set it beside BenchmarkAllReduceLogits (the
// gather a split needs) in engine/collective.
func BenchmarkHead(b *testing.B) {
	const dim = 2048
	path := filepath.Join(b.TempDir(), "head.gguf")
	var ts []gguf.WriteTensor
	for _, rows := range []uint64{32000, 16000} {
		rowBytes, _ := gguf.Q8_0.RowBytes(dim)
		n := rows * rowBytes
		ts = append(ts, gguf.WriteTensor{Name: fmt.Sprintf("output.head_%d", rows), Type: gguf.Q8_0, Dims: []uint64{dim, rows},
			Data: func(w io.Writer) error { return pattern(w, n) }})
	}
	if err := gguf.WriteFile(path, []gguf.KV{{Key: "general.architecture", Value: "orrery-head-bench"}}, ts); err != nil {
		b.Fatal(err)
	}
	be, err := newBackend(path, 1, ml.FlashAttentionEnabled, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	if err := be.Load(context.Background(), func(float32) {}); err != nil {
		b.Fatal(err)
	}
	x := make([]float32, dim)
	for i := range x {
		x[i] = 1
	}
	for _, rows := range []int{32000, 16000} {
		b.Run(fmt.Sprintf("vocab-%d", rows), func(b *testing.B) {
			w := be.Get(fmt.Sprintf("output.head_%d", rows))
			for range b.N {
				c := be.NewContext()
				y := w.Mulmat(c, c.Input().FromFloats(x, dim, 1))
				c.Forward(y).Compute(y)
				c.Close()
			}
		})
	}
}
