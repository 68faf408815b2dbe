package ggml

import (
	"context"
	"runtime"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/orrery-cluster/orrery/engine/backend"
)

// Q4_0 weights moved into ggml's repack buffers give the logits of the same
// weights unpacked (the tiled kernels round the same products in another
// order), and every matrix is moved where this machine allows it.
func TestRepackedLogits(t *testing.T) {
	path := gen(t, "llama", "Q4_0")
	prompt := []int32{1, 300, 301, 302, 17, 250, 99, 7}
	pos := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	run := func(noRepack bool) ([]float32, []float32, int) {
		r, err := Load(context.Background(), path, backend.Options{Threads: 2, BatchSize: 16, NoRepack: noRepack}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		res, err := r.Forward(context.Background(), backend.Batch{Tokens: prompt, Positions: pos, AllLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		// One decode step through the cache (the tiled gemv path).
		next, err := r.Forward(context.Background(), backend.Batch{Tokens: []int32{42}, Positions: []int32{8}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Logits, next.Logits, r.Repacked
	}
	plain, plainNext, n := run(true)
	if n != 0 {
		t.Fatalf("NoRepack: %d matrices repacked", n)
	}
	packed, packedNext, n := run(false)
	// 4 layers × 7 matrices + the output head.
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && n != 4*7+1 {
		t.Errorf("%d matrices repacked, want %d (a build without -DGGML_USE_CPU_REPACK in CGO_CXXFLAGS repacks none)", n, 4*7+1)
	}
	t.Logf("%d matrices repacked", n)
	for _, c := range []struct {
		name string
		a, b []float32
	}{{"prompt", plain, packed}, {"decode", plainNext, packedNext}} {
		var d, m float64
		for i := range c.a {
			d = max(d, float64(abs(c.a[i]-c.b[i])))
			m = max(m, float64(abs(c.a[i])))
		}
		if d/m > 2e-2 {
			t.Errorf("%s: repacked logits differ by %.3g relative", c.name, d/m)
		}
		t.Logf("%s: max relative difference %.2g", c.name, d/m)
	}
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}
