package ggml

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// What a tensor-parallel all-reduce costs a rank whose blocks are on a
// GPU. The sum is a CPU custom op in the graph (allreduce.go), which no
// GPU backend runs: ggml's scheduler cuts the graph there, copies the
// block's partial output to the host, runs the op, and copies the sum
// back for the next block. Each all-reduce is such a crossing, 2 per block
// per forward pass.

// crossingDim is the hidden state's width (the 1b preset's) and
// crossingSegments the crossings per pass (8 blocks' worth).
const (
	crossingDim      = 2048
	crossingSegments = 16
)

// doubler is a Collective of a group whose other ranks all sent the same
// values: the sum doubles them. It touches every value, as a real sum does.
type doubler struct{}

func (doubler) AllReduce(buf []float32) error {
	for i := range buf {
		buf[i] *= 2
	}
	return nil
}

// BenchmarkGPUCrossing times a pass of crossingSegments segments, each an
// elementwise product by a weight (so that it runs where the weight is)
// followed by the all-reduce op, against the same pass with ggml's own
// ×2 in place of the op, with the weight on the GPU (Vulkan: lavapipe
// here) and on the CPU. The difference per segment is what one crossing
// costs (us/crossing): on the GPU the sync, the copies both ways and the
// graph's extra split; on the CPU only the call into Go. It checks first
// that both passes give the same values, to the bit.
//
//	ORRERY_GPU_LIB=$PWD/lib/ollama go test -run '^$' -bench GPUCrossing ./engine/backend/ggml
func BenchmarkGPUCrossing(b *testing.B) {
	if os.Getenv(gpuLibEnv) == "" {
		b.Skipf("%s is not set: make gpu builds ggml's GPU backends", gpuLibEnv)
	}
	path := filepath.Join(b.TempDir(), "crossing.gguf")
	writeCrossingModel(b, path)
	ds, err := Devices(path)
	if err != nil {
		b.Fatal(err)
	}
	i := slices.IndexFunc(ds, func(d runnerapi.Device) bool { return d.Library == "Vulkan" })
	if i < 0 {
		b.Fatalf("no Vulkan device among %v", ds)
	}
	// Both backends stay loaded until the end: lavapipe has corrupted
	// its heap when a GPU backend was loaded after another was closed.
	gpu := crossingBackend(b, path, &ml.DeviceID{ID: ds[i].ID, Library: ds[i].Library})
	cpu := crossingBackend(b, path, nil)
	for _, c := range []struct {
		name  string
		be    ml.Backend
		onGPU bool
	}{{"vulkan", gpu, true}, {"cpu", cpu, false}} {
		b.Run(c.name, func(b *testing.B) {
			// A rank's CPU threads, bound as its passes bind them.
			r := &Rank{group: newTPGroup(doubler{})}
			defer r.group.close()
			var err error
			if r.threads, err = newThreads(c.be, 2); err != nil {
				b.Fatal(err)
			}
			defer r.threads.close()
			defer r.threads.bind()()
			with, without := crossingPass(b, c.be, r, c.onGPU, true), crossingPass(b, c.be, r, c.onGPU, false)
			if !slices.Equal(with.out, without.out) {
				b.Fatalf("the all-reduce's pass differs from ×2's: %v… against %v…", with.out[:4], without.out[:4])
			}
			var tWith, tWithout time.Duration
			for b.Loop() {
				tWith += crossingPass(b, c.be, r, c.onGPU, true).took
				tWithout += crossingPass(b, c.be, r, c.onGPU, false).took
			}
			n := float64(b.N)
			b.ReportMetric(float64(tWith.Microseconds())/n, "us/pass-with")
			b.ReportMetric(float64(tWithout.Microseconds())/n, "us/pass-without")
			b.ReportMetric(float64((tWith-tWithout).Microseconds())/n/crossingSegments, "us/crossing")
		})
	}
}

// writeCrossingModel writes a one-block model: blk.0.g, crossingDim
// halves (F32), and a small token embedding beside it.
func writeCrossingModel(b *testing.B, path string) {
	g := make([]float32, crossingDim)
	for i := range g {
		g[i] = 0.5
	}
	emb := make([]float32, crossingDim*4)
	tensor := func(name string, dims []uint64, v []float32) gguf.WriteTensor {
		return gguf.WriteTensor{Name: name, Type: gguf.F32, Dims: dims,
			Data: func(w io.Writer) error { _, err := w.Write(f32Bytes(v)); return err }}
	}
	const arch = "orrery-crossing-test"
	kvs := []gguf.KV{{Key: "general.architecture", Value: arch}, {Key: arch + ".block_count", Value: uint32(1)}}
	ts := []gguf.WriteTensor{tensor("token_embd.weight", []uint64{crossingDim, 4}, emb), tensor("blk.0.g", []uint64{crossingDim}, g)}
	if err := gguf.WriteFile(path, kvs, ts); err != nil {
		b.Fatal(err)
	}
}

// crossingBackend loads the model with block 0 on dev (nil: the CPU),
// closed when the benchmark ends.
func crossingBackend(b *testing.B, path string, dev *ml.DeviceID) ml.Backend {
	p := ml.BackendParams{AllocMemory: true, NumThreads: 2}
	if dev != nil {
		p.GPULayers = ml.GPULayersList{{DeviceID: *dev, Layers: []int{0}}}
	}
	be, err := ml.NewBackend(path, p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(be.Close)
	if err := be.Load(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	return be
}

// crossingResult is one pass's output and its time.
type crossingResult struct {
	out  []float32
	took time.Duration
}

// crossingPass computes x·g, then the all-reduce (reduce) or ×2, for
// each segment, in one graph of a fresh context, as a rank's pass does
// (onGPU: g is on a GPU).
func crossingPass(b *testing.B, be ml.Backend, r *Rank, onGPU, reduce bool) crossingResult {
	x := make([]float32, crossingDim)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	start := time.Now()
	c := be.NewContext()
	defer c.Close()
	g := be.Get("blk.0.g")
	t := c.Input().FromFloats(x, crossingDim, 1)
	for range crossingSegments {
		t = t.Mul(c, g)
		if reduce {
			t = r.allReduce(c, t, onGPU)
		} else {
			t = t.Scale(c, 2)
		}
	}
	c.Forward(t).Compute(t)
	out := t.Floats()
	took := time.Since(start)
	if err := r.group.take(); err != nil {
		b.Fatal(err)
	}
	return crossingResult{out: out, took: took}
}
