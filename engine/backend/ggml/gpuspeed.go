package ggml

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The GPU's speed probe: the CPU's matrices (probeTypes, 4 MiB each) as
// block 0 of a one-block file, put on the device; the memory bound's
// matrices made in the device's memory; a chain of crossDepth products of
// a crossDim square F32 matrix, with and without a host op between them;
// and the CPU's two tiny models with every block on the device. lavapipe
// compiles each kernel's pipeline at its first use (a second or two each
// here, kept in Mesa's shader cache), so the shapes are the CPU's few.
const (
	// crossDim is small so that the products take little time beside the
	// trips (on lavapipe, at 1 GB/s, a 2048-wide matrix's 16 MiB took
	// 400 times a trip's 40 µs, and load on the machine hid the trips): a
	// trip's cost is its synchronisation, not its row's bytes (1 KiB here,
	// 8 to 32 KiB in a model; at PCIe's 16 GB/s, a couple of µs).
	crossDim   = 256
	crossDepth = 16
	crossRuns  = 12
	// gpuBudget is what one timed graph of products should take (see
	// productTimer).
	gpuBudget = 20 * time.Millisecond
	// gpuMemTime sizes the memory bound's matrices (see MeasureGPU).
	gpuMemTime = 200 * time.Millisecond
)

// MeasureGPU measures the GPU dev (one of Devices; a software one takes
// software) as MeasureSpeed measures the CPU, the host's threads driving
// it. Setup must have run first. It loads three models on the device and
// keeps them loaded until it returns: loading GPU models one after another
// in one process corrupted lavapipe's heap here, so a process measures one
// device (`orrery speed` runs a child for each).
func MeasureGPU(ctx context.Context, dir string, threads int, dev runnerapi.Device, software bool) (g runnerapi.GPUSpeed, err error) {
	start := time.Now()
	g = runnerapi.GPUSpeed{Device: dev}
	f, err := os.CreateTemp(dir, "speed-probe-gpu-*.gguf")
	if err != nil {
		return g, err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	if err := writeProbe(path, true); err != nil {
		return g, fmt.Errorf("GPU speed probe file: %w", err)
	}
	pf, err := gguf.ReadFile(path)
	if err != nil {
		return g, err
	}
	on := ml.GPULayersList{{DeviceID: ml.DeviceID{ID: dev.ID, Library: dev.Library}, Layers: []int{0}}}
	b, err := newBackend(path, threads, ml.FlashAttentionEnabled, on)
	if err != nil {
		return g, fmt.Errorf("ggml backend on %s: %w", dev, err)
	}
	defer b.Close()
	if err := b.Load(ctx, func(float32) {}); err != nil {
		return g, fmt.Errorf("load the probe on %s: %w", dev, err)
	}
	if err := onDevice(b.BackendMemory(), dev); err != nil {
		return g, err
	}
	th, err := newThreads(b, threads)
	if err != nil {
		return g, fmt.Errorf("ggml threads: %w", err)
	}
	defer th.close()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ggml on %s: %v", dev, p)
		}
	}()
	sp := runnerapi.Speed{Types: map[string]runnerapi.TypeSpeed{}}
	product := productTimer(b, th, gpuBudget)
	if err := measureTypes(ctx, b, pf, &sp, product, false); err != nil {
		return g, err
	}
	g.Types = sp.Types
	mc := b.NewContext()
	// Not capped at 1, as the CPU's is: a fast GPU's product of a 4 MiB
	// matrix is bound by its launch, and a large matrix's streams faster.
	// So a type's rate, its kernel's times the ratio, is Q8_0's streaming
	// rate scaled by how that type's kernel compares with Q8_0's.
	// The large matrices are what Q8_0's kernel reads in gpuMemTime, at
	// least 4× the type probes' and at most the CPU's 256 MiB: lavapipe
	// reads a few hundred MB/s, and 256 MiB took it minutes.
	q8 := sp.Types["Q8_0"].DecodeBytesPerSec
	size := int(min(probeMemBytes, max(4*probeTypeBytes, q8*gpuMemTime.Seconds())))
	g.MemBytesPerSec, g.StreamRatio = memoryBound(mc.Layer(0), product, q8, size)
	mc.Close()
	if g.CrossMicros, err = crossCost(b, th); err != nil {
		return g, err
	}
	var ranks []*Rank
	defer func() {
		for _, r := range ranks {
			r.Close()
		}
	}()
	opts := backend.Options{Threads: threads, GPULayers: runnerapi.GPUAuto, GPUSoftware: software, GPUDevice: dev.ID}
	if g.LayerMicros, g.TokenMicros, err = passOverhead(ctx, dir, opts, func(r *Rank) { ranks = append(ranks, r) }); err != nil {
		return g, err
	}
	g.Seconds = time.Since(start).Seconds()
	return g, nil
}

// onDevice checks that ollama put the probe's block on dev: a layer given
// a device it does not know stays on the CPU without a word.
func onDevice(mem ml.BackendMemory, dev runnerapi.Device) error {
	for _, d := range mem.GPUs {
		if d.ID == dev.ID && d.Library == dev.Library && at(d.Weights, 0) > 0 {
			return nil
		}
	}
	return fmt.Errorf("the GPU probe's weights are not on %s (ggml lists %d GPUs)", dev, len(mem.GPUs))
}

// crossCost is what one host op costs a chain of products on the device:
// crossDepth products of a decode row by a crossDim square matrix, timed
// with a host op (a tensor-parallel sum over a group of one, summing
// nothing) after each and without, the difference per op. Each op takes
// the row to the host and back, as a tensor-parallel sum does from a
// block on the GPU.
func crossCost(b ml.Backend, th *threads) (float64, error) {
	g := newTPGroup(nopCollective{})
	defer g.close()
	mc := b.NewContext()
	defer mc.Close()
	w := mc.Layer(0).Zeros(ml.DTypeF32, crossDim, crossDim)
	x := make([]float32, crossDim)
	chain := func(host bool) time.Duration {
		c := b.NewContext()
		defer c.Close()
		h := c.Input().FromFloats(x, crossDim, 1)
		for range crossDepth {
			h = w.Mulmat(c, h)
			if host {
				h = groupOp(c, h, g, true)
			}
		}
		defer th.bind()()
		t0 := time.Now()
		c.Forward(h).Compute(h)
		await(h)
		return time.Since(t0)
	}
	// The two chains alternate, and each keeps its fastest run: load on
	// the machine only adds time, and comes and goes over both alike. The
	// first run of each compiles.
	plain, crossed := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for i := range crossRuns + 1 {
		p, c := chain(false), chain(true)
		if i > 0 {
			plain, crossed = min(plain, p), min(crossed, c)
		}
	}
	if err := g.take(); err != nil {
		return 0, err
	}
	return max(0, float64((crossed-plain).Nanoseconds())/1e3/crossDepth), nil
}

// nopCollective is a group of one: its sum leaves the values as they are.
type nopCollective struct{}

func (nopCollective) AllReduce([]float32) error { return nil }
