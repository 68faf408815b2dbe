package ggml

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/split"
)

// noSum is a group whose all-reduce adds nothing: a rank's own compute,
// without waiting for the others.
type noSum struct{}

func (noSum) AllReduce([]float32) error { return nil }

// BenchmarkSliceDecode is one decode step (at position 64) of the whole
// model on one thread against rank 0's slice of a tensor-parallel 2 with
// an all-reduce that adds nothing: the compute a rank does per step, so
// the speed-up a group could reach with free communication. The model is
// $ORRERY_BENCH_MODEL (e.g. the 1b preset), or the small preset.
func BenchmarkSliceDecode(b *testing.B) {
	path := benchModel(b)
	plan, err := split.PlanTPFile(path, 2)
	if err != nil {
		b.Fatal(err)
	}
	slice := filepath.Join(b.TempDir(), "tp0.gguf")
	if err := split.WriteTPSlice(path, slice, 0, layers(b, path), plan[0], "bench"); err != nil {
		b.Fatal(err)
	}
	opts := backend.Options{Threads: 1, BatchSize: 64}
	for _, c := range []struct {
		name  string
		path  string
		group backend.Collective
	}{{"whole", path, nil}, {"tp0-of-2", slice, noSum{}}} {
		b.Run(c.name, func(b *testing.B) {
			o := opts
			o.Group = c.group
			r, err := Load(context.Background(), c.path, o, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			ctx := context.Background()
			prefill64(b, r)
			b.ResetTimer()
			for i := range b.N {
				p := int32(64 + i%64)
				if _, err := r.Forward(ctx, backend.Batch{Tokens: []int32{int32(300 + i*7919%3000)}, Positions: []int32{p}}); err != nil {
					b.Fatal(err)
				}
				if p == 127 {
					b.StopTimer()
					if err := r.Remove(0, 64); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
		})
	}
}

// benchModel is $ORRERY_BENCH_MODEL, or the small preset written for b.
func benchModel(b *testing.B) string {
	if path := os.Getenv("ORRERY_BENCH_MODEL"); path != "" {
		return path
	}
	path := filepath.Join(b.TempDir(), "small.gguf")
	if err := model.Generate(path, model.Presets["small"]); err != nil {
		b.Fatal(err)
	}
	return path
}

// prefill64 fills sequence 0's positions 0–63 of r, where the
// benchmarks' steps start.
func prefill64(b *testing.B, r *Rank) {
	prompt := make([]int32, 64)
	pos := make([]int32, 64)
	for i := range prompt {
		prompt[i], pos[i] = int32(300+i), int32(i)
	}
	if _, err := r.Forward(context.Background(), backend.Batch{Tokens: prompt, Positions: pos}); err != nil {
		b.Fatal(err)
	}
}

func layers(b *testing.B, path string) int {
	_, cfg := modeltest.Read(b, path)
	return cfg.Layers
}
