package ggml

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The speed probe: one matrix of each weight type, small enough to stay
// in the caches (the kernels' compute bound), and one F32 matrix far
// larger than any cache (the memory bound). Weights hold a constant byte
// (0x3c: F16 and BF16 scales near 1, no subnormals): a kernel's speed
// does not depend on the values, and every page is really written.
const (
	probeCols      = 4096
	probeTypeBytes = 4 << 20
	probeMemBytes  = 256 << 20
	probeBatch     = 64
)

// probeTypes are the weight types measured: those of the common files
// (F16/BF16 originals, Q8_0, Q4_0, the K-quants of Q4_K_M and Q5_K_M,
// gpt-oss's MXFP4). Others take the nearest in bits per weight.
var probeTypes = []gguf.TensorType{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.MXFP4}

// MeasureSpeed runs the compute micro-benchmark on threads threads (about
// a second here): each probe type's one-row (decode) and 64-row (prefill)
// products, the memory bound and the cost of one op. dir holds the probe
// file while it runs.
func MeasureSpeed(ctx context.Context, dir string, threads int) (sp runnerapi.Speed, err error) {
	start := time.Now()
	f, err := os.CreateTemp(dir, "speed-probe-*.gguf")
	if err != nil {
		return sp, err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	if err := writeProbe(path, false); err != nil {
		return sp, fmt.Errorf("speed probe file: %w", err)
	}
	pf, err := gguf.ReadFile(path)
	if err != nil {
		return sp, err
	}
	b, err := newBackend(path, threads, ml.FlashAttentionEnabled, nil)
	if err != nil {
		return sp, fmt.Errorf("ggml backend: %w", err)
	}
	defer b.Close()
	if err := b.Load(ctx, func(float32) {}); err != nil {
		return sp, fmt.Errorf("load the probe: %w", err)
	}
	// The probe computes as a rank does: its threads bound, in a pool.
	th, err := newThreads(b, threads)
	if err != nil {
		return sp, fmt.Errorf("ggml threads: %w", err)
	}
	defer th.close()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ggml: %v", p)
		}
	}()
	sp = runnerapi.Speed{Threads: threads, Types: map[string]runnerapi.TypeSpeed{}}
	product := productTimer(b, th, 0)
	if err := measureTypes(ctx, b, pf, &sp, product, true); err != nil {
		return sp, err
	}
	mc := b.NewContext()
	sp.MemBytesPerSec, sp.StreamRatio = memoryBound(mc.Input(), product, sp.Types["Q8_0"].DecodeBytesPerSec, probeMemBytes)
	sp.StreamRatio = min(1, sp.StreamRatio)
	mc.Close()
	if sp.LayerMicros, sp.TokenMicros, err = passOverhead(ctx, dir, backend.Options{Threads: threads}, nil); err != nil {
		return sp, err
	}
	sp.MeasuredAt = time.Now().UTC()
	sp.Seconds = time.Since(start).Seconds()
	return sp, nil
}

// productTimer times reps products w·x (x of batch rows) in one graph,
// so that the launch of a graph is a small part: the median per product
// of runs after one to warm up. With a budget (a GPU's: lavapipe computes
// a 64-row product of a probe matrix in a second or so, a real GPU in
// microseconds), reps and runs follow the device's speed instead: after
// the warm-up, which compiles the kernel's pipeline, one product; if it
// took the budget or more, that is the figure, else the median of up to 3
// runs of as many products in one graph as fill the budget (at most
// maxBudgetReps).
func productTimer(b ml.Backend, th *threads, budget time.Duration) func(w ml.Tensor, batch, reps, runs int) time.Duration {
	ones := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		return x
	}
	run := func(w ml.Tensor, batch, reps int) time.Duration {
		c := b.NewContext()
		defer c.Close()
		in := c.Input().FromFloats(ones(probeCols*batch), probeCols, batch)
		ys := make([]ml.Tensor, reps)
		for j := range ys {
			ys[j] = w.Mulmat(c, in)
		}
		defer th.bind()()
		t0 := time.Now()
		c.Forward(ys...).Compute(ys...)
		await(ys[0])
		return time.Since(t0) / time.Duration(reps)
	}
	if budget > 0 {
		return func(w ml.Tensor, batch, _, runs int) time.Duration {
			run(w, batch, 1) // compiles the pipeline on a GPU
			d := run(w, batch, 1)
			if d >= budget {
				return d
			}
			reps := int(min(maxBudgetReps, (budget+d-1)/max(d, 1)))
			ds := []time.Duration{}
			for range min(runs, 3) {
				ds = append(ds, run(w, batch, reps))
			}
			return median(ds)
		}
	}
	return func(w ml.Tensor, batch, reps, runs int) time.Duration {
		var ds []time.Duration
		for i := range runs + 1 {
			d := run(w, batch, reps)
			if i > 0 {
				ds = append(ds, d)
			}
		}
		return median(ds)
	}
}

// await waits for the graph that computed t: ollama's Compute only
// submits it (ggml_backend_sched_graph_compute_async), and waits at the
// first read of an output. On the CPU it has finished already; on a GPU,
// a time taken before it would be the submission's, and a context closed
// before it would free buffers the device is still computing with (which
// corrupted lavapipe's heap here).
func await(t ml.Tensor) { t.Floats() }

// maxBudgetReps bounds the products a budgeted timer puts in one graph.
const maxBudgetReps = 64

// memoryBound is the memory bound, and streaming's toll on a kernel
// (q8 the Q8_0 kernel's bytes/s in the caches; the ratio is over 1 where
// the small matrix's product is bound by its launch, as on a fast GPU):
// one-row products of an F32 and a Q8_0 matrix of size bytes, zeroed
// (memset writes every page), made in c (the host's memory, or a
// device's).
func memoryBound(c ml.Context, product func(ml.Tensor, int, int, int) time.Duration, q8 float64, size int) (mem, ratio float64) {
	rows := size / 4 / probeCols
	big := c.Zeros(ml.DTypeF32, probeCols, rows)
	mem = float64(rows*probeCols*4) / product(big, 1, 1, 3).Seconds()
	q8Row, _ := gguf.Q8_0.RowBytes(probeCols)
	q8Rows := uint64(size) / q8Row
	bigQ8 := c.Zeros(ml.DTypeQ80, probeCols, int(q8Rows))
	stream := float64(q8Rows*q8Row) / product(bigQ8, 1, 1, 3).Seconds()
	return mem, stream / q8
}

// measureTypes times each probe matrix's one-row products on ggml's plain
// layouts, then (with repack, on the CPU) repacks those ggml can, and
// times 64-row ones.
func measureTypes(ctx context.Context, b ml.Backend, pf *gguf.File, sp *runnerapi.Speed, product func(ml.Tensor, int, int, int) time.Duration, repack bool) error {
	// Decode on ggml's plain layouts: a repacked weight's one-row product
	// measured slower in isolation here than in a model, where repacking
	// makes decode faster, so the plain figure is the safer bound.
	for _, ti := range pf.Tensors {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows := float64(ti.Dims[1])
		dec := product(b.Get(ti.Name), 1, 16, 5)
		sp.Types[ti.Type.String()] = runnerapi.TypeSpeed{
			DecodeBytesPerSec: float64(ti.Size) / dec.Seconds(),
			BitsPerWeight:     float64(ti.Size) * 8 / (rows * probeCols),
		}
	}
	// Prefill as a runner computes it: repacked where ggml can.
	var rp *repacker
	for _, ti := range pf.Tensors {
		if !repack || !repackable(ti) {
			continue
		}
		if rp == nil {
			if rp = newRepacker(len(pf.Tensors)); rp == nil {
				break
			}
			defer rp.close()
		}
		if err := rp.move(b.Get(ti.Name)); err != nil {
			return fmt.Errorf("repack %s: %w", ti.Name, err)
		}
	}
	for _, ti := range pf.Tensors {
		if err := ctx.Err(); err != nil {
			return err
		}
		pre := product(b.Get(ti.Name), probeBatch, 2, 3)
		ts := sp.Types[ti.Type.String()]
		ts.PrefillFlopsPerSec = 2 * float64(ti.Dims[1]) * probeCols * probeBatch / pre.Seconds()
		sp.Types[ti.Type.String()] = ts
	}
	return nil
}

// passOverhead decodes tokens on two tiny real models (dim 64, 4 and 16
// blocks, F32), whose matrix products cost next to nothing: the slope is
// a block's own cost in a pass, the intercept the pass's. opts are the
// ranks' (threads; on a GPU, every block there); keep, when not nil, takes
// each rank loaded and closes it later (on a GPU both stay loaded until
// the measurement ends: see MeasureGPU), else each closes at once.
func passOverhead(ctx context.Context, dir string, opts backend.Options, keep func(*Rank)) (layer, token float64, err error) {
	per := map[int]float64{}
	for _, layers := range []int{4, 16} {
		o := model.Presets["tiny"]
		o.Layers, o.ContextLen = layers, 256
		path := filepath.Join(dir, fmt.Sprintf("speed-probe-tiny-%d-%d.gguf", layers, os.Getpid()))
		if err := model.Generate(path, o); err != nil {
			return 0, 0, fmt.Errorf("tiny probe model: %w", err)
		}
		ro := opts
		ro.ContextLen, ro.BatchSize = 256, 64
		r, err := Load(ctx, path, ro, nil)
		os.Remove(path) // loaded into memory
		if err != nil {
			return 0, 0, err
		}
		if keep != nil {
			keep(r)
		} else {
			defer r.Close()
		}
		if opts.GPULayers != 0 && r.Offload().Blocks != layers {
			return 0, 0, fmt.Errorf("tiny probe model: %s, want every block on the GPU (%s)", r.Offload(), r.Offload().Reason)
		}
		const n = 48
		var ds []time.Duration
		for p := range n {
			t0 := time.Now()
			if _, err := r.Forward(ctx, backend.Batch{Tokens: []int32{int32(p % 100)}, Positions: []int32{int32(p)}}); err != nil {
				return 0, 0, err
			}
			if p >= 8 {
				ds = append(ds, time.Since(t0))
			}
		}
		per[layers] = float64(median(ds).Nanoseconds()) / 1e3
	}
	layer = max(0, (per[16]-per[4])/12)
	return layer, max(0, per[4]-4*layer), nil
}

// writeProbe writes the probe's matrices, probeCols wide, rows a multiple
// of 64 for the repacked layouts: output.probe_<type> for the CPU, or
// (block) blk.0.probe_<type> of a one-block file, which a GPU takes as
// block 0.
func writeProbe(path string, block bool) error {
	var ts []gguf.WriteTensor
	for _, t := range probeTypes {
		rowBytes, ok := t.RowBytes(probeCols)
		if !ok {
			return fmt.Errorf("type %v: no row size", t)
		}
		rows := max(64, probeTypeBytes/rowBytes/64*64)
		n := rows * rowBytes
		// "output.": ollama puts a tensor whose name has digits and no
		// known prefix in the block the digits name.
		name := "output.probe_" + strings.ToLower(t.String())
		if block {
			name = "blk.0.probe_" + strings.ToLower(t.String())
		}
		ts = append(ts, gguf.WriteTensor{Name: name, Type: t, Dims: []uint64{probeCols, rows},
			Data: func(w io.Writer) error { return pattern(w, n) }})
	}
	const arch = "orrery-speed-probe"
	kvs := []gguf.KV{{Key: "general.architecture", Value: arch}, {Key: "general.name", Value: filepath.Base(path)}}
	if block {
		kvs = append(kvs, gguf.KV{Key: arch + ".block_count", Value: uint32(1)})
	}
	return gguf.WriteFile(path, kvs, ts)
}

func pattern(w io.Writer, n uint64) error {
	buf := make([]byte, 1<<16)
	for i := range buf {
		buf[i] = 0x3c
	}
	for n > 0 {
		k := min(n, uint64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
