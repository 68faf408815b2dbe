//go:build cgo

package ggml

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
)

// TestThreadsPerRank: ollama's ggml has one CPU backend per process, whose
// thread count the model loaded last set for all. A target on two threads
// beside a draft model on one computed on one. Each rank now computes on
// its own count, whatever was loaded or computed before it.
func TestThreadsPerRank(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := model.Generate(path, model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	load := func(threads int) *Rank {
		r, err := Load(ctx, path, backend.Options{Threads: threads, BatchSize: 8}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	target, draft := load(3), load(1)
	forward := func(r *Rank, pos int32) {
		t.Helper()
		if _, err := r.Forward(ctx, backend.Batch{Tokens: []int32{5}, Positions: []int32{pos}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, step := range []struct {
		r    *Rank
		want int
	}{{target, 3}, {draft, 1}, {target, 3}, {target, 3}, {draft, 1}} {
		forward(step.r, int32(i))
		if got := step.r.threads.computeThreads(); got != step.want {
			t.Fatalf("step %d: the CPU backend computes on %d threads after a forward of the rank of %d", i, got, step.want)
		}
	}
	// The draft's load set the backend to one thread; the target's Reset
	// binds its own again (its shift and removal may compute).
	if err := target.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := target.threads.computeThreads(); got != 3 {
		t.Fatalf("after the target's Reset the CPU backend computes on %d threads, want 3", got)
	}
}

// BenchmarkDecodeThreads is one decode step of the trained KJV models
// (models/kjv) on 1 and 2 threads, and of the target on 2 beside the draft
// on 1 loaded after it (a runner with a small draft): what the thread pool
// and the per-rank thread count are for.
func BenchmarkDecodeThreads(b *testing.B) {
	kjv := func(name string) string {
		return filepath.Join("..", "..", "..", "models", "kjv", "kjv-"+name+"-f16.gguf")
	}
	for _, c := range []struct {
		name    string
		model   string
		threads int
		beside  bool // the draft, on one thread, loaded after
	}{
		{"draft-1", "draft", 1, false}, {"draft-2", "draft", 2, false},
		{"target-1", "target", 1, false}, {"target-2", "target", 2, false}, {"target-2-beside-draft-1", "target", 2, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			r, err := Load(ctx, kjv(c.model), backend.Options{Threads: c.threads, BatchSize: 16}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if c.beside {
				d, err := Load(ctx, kjv("draft"), backend.Options{Threads: 1, BatchSize: 16}, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
			}
			for i := 0; b.Loop(); i++ {
				p := int32(i % 128)
				if p == 0 && i > 0 {
					if err := r.Remove(0, 0); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := r.Forward(ctx, backend.Batch{Tokens: []int32{int32(30 + i*7%500)}, Positions: []int32{p}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
