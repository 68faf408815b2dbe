package ggml

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
)

// BenchmarkStepRows is one step of n rows at positions 64–191 (a decode
// step, or a speculative verify of n-1 drafts): what a step costs by its
// rows, which decides whether drafting pays. The model is
// $ORRERY_BENCH_MODEL (e.g. models/kjv/kjv-target-f16.gguf), or the small
// preset; threads $ORRERY_BENCH_THREADS (default 1).
func BenchmarkStepRows(b *testing.B) {
	path := benchModel(b)
	threads := 1
	if s := os.Getenv("ORRERY_BENCH_THREADS"); s != "" {
		if _, err := fmt.Sscan(s, &threads); err != nil {
			b.Fatalf("ORRERY_BENCH_THREADS=%q: %v", s, err)
		}
	}
	r, err := Load(context.Background(), path, backend.Options{Threads: threads, BatchSize: 64, ContextLen: 256}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	prefill64(b, r)
	for _, n := range []int{1, 2, 3, 5, 9} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			toks := make([]int32, n)
			ps := make([]int32, n)
			outs := make([]int32, n) // a verify needs every row's logits
			for j := range outs {
				outs[j] = int32(j)
			}
			steps := 128 / n                        // steps from position 64 before the window starts again
			if err := r.Remove(0, 64); err != nil { // what the last run left
				b.Fatal(err)
			}
			for i := range b.N {
				at := 64 + (i%steps)*n
				for j := range n {
					toks[j], ps[j] = int32(3+(i*7919+j*31)%3000), int32(at+j)
				}
				if _, err := r.Forward(ctx, backend.Batch{Tokens: toks, Positions: ps, Outputs: outs}); err != nil {
					b.Fatal(err)
				}
				if i%steps == steps-1 {
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
