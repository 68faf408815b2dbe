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
	if err := writeProbe(path); err != nil {
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
	ones := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		return x
	}
	// product times reps products w·x (x of batch rows) in one graph,
	// so that the launch of a graph is a small part: the median per
	// product of runs after one to warm up.
	product := func(w ml.Tensor, batch, reps, runs int) time.Duration {
		x := ones(probeCols * batch)
		var ds []time.Duration
		for i := range runs + 1 {
			c := b.NewContext()
			in := c.Input().FromFloats(x, probeCols, batch)
			ys := make([]ml.Tensor, reps)
			for j := range ys {
				ys[j] = w.Mulmat(c, in)
			}
			d := func() time.Duration {
				defer th.bind()()
				t0 := time.Now()
				c.Forward(ys...).Compute(ys...)
				return time.Since(t0)
			}()
			if i > 0 {
				ds = append(ds, d/time.Duration(reps))
			}
			c.Close()
		}
		return median(ds)
	}
	if err := measureTypes(ctx, b, pf, &sp, product); err != nil {
		return sp, err
	}
	// The memory bound, and streaming's toll on a kernel: an F32 and a
	// Q8_0 matrix of probeMemBytes, zeroed (memset writes every page).
	mc := b.NewContext()
	big := mc.Input().Zeros(ml.DTypeF32, probeCols, probeMemBytes/4/probeCols)
	sp.MemBytesPerSec = probeMemBytes / product(big, 1, 1, 3).Seconds()
	q8Row, _ := gguf.Q8_0.RowBytes(probeCols)
	q8Rows := probeMemBytes / q8Row
	bigQ8 := mc.Input().Zeros(ml.DTypeQ80, probeCols, int(q8Rows))
	stream := float64(q8Rows*q8Row) / product(bigQ8, 1, 1, 3).Seconds()
	sp.StreamRatio = min(1, stream/sp.Types["Q8_0"].DecodeBytesPerSec)
	mc.Close()
	if sp.LayerMicros, sp.TokenMicros, err = passOverhead(ctx, dir, threads); err != nil {
		return sp, err
	}
	sp.MeasuredAt = time.Now().UTC()
	sp.Seconds = time.Since(start).Seconds()
	return sp, nil
}

// measureTypes times each probe matrix's one-row products on ggml's plain
// layouts, then repacks those ggml can and times 64-row ones.
func measureTypes(ctx context.Context, b ml.Backend, pf *gguf.File, sp *runnerapi.Speed, product func(ml.Tensor, int, int, int) time.Duration) error {
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
		if !repackable(ti) {
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
// a block's own cost in a pass, the intercept the pass's.
func passOverhead(ctx context.Context, dir string, threads int) (layer, token float64, err error) {
	per := map[int]float64{}
	for _, layers := range []int{4, 16} {
		o := model.Presets["tiny"]
		o.Layers, o.ContextLen = layers, 256
		path := filepath.Join(dir, fmt.Sprintf("speed-probe-tiny-%d-%d.gguf", layers, os.Getpid()))
		if err := model.Generate(path, o); err != nil {
			return 0, 0, fmt.Errorf("tiny probe model: %w", err)
		}
		r, err := Load(ctx, path, backend.Options{Threads: threads, ContextLen: 256, BatchSize: 64}, nil)
		os.Remove(path) // loaded into memory
		if err != nil {
			return 0, 0, err
		}
		const n = 48
		var ds []time.Duration
		for p := range n {
			t0 := time.Now()
			if _, err := r.Forward(ctx, backend.Batch{Tokens: []int32{int32(p % 100)}, Positions: []int32{int32(p)}}); err != nil {
				r.Close()
				return 0, 0, err
			}
			if p >= 8 {
				ds = append(ds, time.Since(t0))
			}
		}
		r.Close()
		per[layers] = float64(median(ds).Nanoseconds()) / 1e3
	}
	layer = max(0, (per[16]-per[4])/12)
	return layer, max(0, per[4]-4*layer), nil
}

// writeProbe writes the probe's matrices (output.probe_<type>, probeCols wide,
// rows a multiple of 64 for the repacked layouts).
func writeProbe(path string) error {
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
		ts = append(ts, gguf.WriteTensor{Name: "output.probe_" + strings.ToLower(t.String()), Type: t, Dims: []uint64{probeCols, rows},
			Data: func(w io.Writer) error { return pattern(w, n) }})
	}
	kvs := []gguf.KV{{Key: "general.architecture", Value: "orrery-speed-probe"}, {Key: "general.name", Value: filepath.Base(path)}}
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
