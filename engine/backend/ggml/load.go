package ggml

import (
	"context"
	"errors"
	"fmt"

	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

// Load loads the model at path (a whole model or a shard holding the
// rank's blocks) and prepares a KV cache. progress gets 0..1 as weights load.
func Load(ctx context.Context, path string, opts backend.Options, progress func(float32)) (*Rank, error) {
	f, err := gguf.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := opts.Resolve(cfg); err != nil {
		return nil, err
	}
	if cfg.TP != nil && opts.Group == nil {
		return nil, fmt.Errorf("%s: a tensor-parallel slice (rank %d of %d) needs its group", path, cfg.TP.Rank, cfg.TP.Ranks)
	}
	plan, err := planGPU(path, f, cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return loadFitting(plan, func(plan gpuPlan) (*Rank, error) { return load(ctx, path, f, cfg, opts, plan, progress) })
}

// loadFitting loads with plan, and again with fewer blocks on the GPU for
// as long as a load finds the device short of memory (ml.ErrNoMem: the
// estimate allowed more than the device had), rather than no rank; the
// rank's Offload.Reason says so.
func loadFitting(plan gpuPlan, load func(gpuPlan) (*Rank, error)) (*Rank, error) {
	for {
		r, err := load(plan)
		var oom ml.ErrNoMem
		if err == nil || !errors.As(err, &oom) || plan.empty() {
			return r, err
		}
		next := plan.fewer()
		next.reason = fmt.Sprintf("out of memory on %s with %d blocks (head %v); loaded with %d", plan.dev.Name, len(plan.blocks), plan.head, len(next.blocks))
		plan = next
	}
}

// load loads the rank with plan's blocks on its GPU; an ml.ErrNoMem (from
// the weights' buffers, or the compute buffers reserve sizes) says the
// device is short of memory for them.
func load(ctx context.Context, path string, f *gguf.File, cfg model.Config, opts backend.Options, plan gpuPlan, progress func(float32)) (*Rank, error) {
	before := largeAnon()
	fa := ml.FlashAttentionEnabled
	if opts.NoFlashAttention {
		fa = ml.FlashAttentionDisabled
	}
	b, err := newBackend(path, opts.Threads, fa, plan.list(cfg))
	if err != nil {
		return nil, fmt.Errorf("ggml backend: %w", err)
	}
	// Before the weights are read into the buffers just allocated.
	adviseHugePages(before)
	if progress == nil {
		progress = func(float32) {}
	}
	if err := b.Load(ctx, progress); err != nil {
		b.Close()
		return nil, fmt.Errorf("load weights: %w", err)
	}
	r := &Rank{cfg: cfg, opts: opts, b: b, gpu: plan}
	if r.threads, err = newThreads(b, opts.Threads); err != nil {
		b.Close()
		return nil, fmt.Errorf("ggml threads: %w", err)
	}
	get := func(name string, required bool) (ml.Tensor, error) {
		t := b.Get(name)
		if t == nil && required {
			return nil, fmt.Errorf("tensor %s missing", name)
		}
		return t, nil
	}
	var errs []error
	must := func(name string) ml.Tensor {
		t, err := get(name, true)
		errs = append(errs, err)
		return t
	}
	if opts.FirstLayer == 0 {
		r.tokEmb = must("token_embd.weight")
	}
	if cfg.HasHead(opts.LastLayer) {
		errs = append(errs, r.loadHead(must))
	}
	for i := opts.FirstLayer; i < opts.LastLayer; i++ {
		r.layers = append(r.layers, loadLayer(cfg, i, fmt.Sprintf("blk.%d.", i), must))
	}
	if err := errors.Join(errs...); err != nil {
		b.Close()
		r.threads.close()
		return nil, err
	}
	if cfg.TP != nil {
		r.group = newTPGroup(opts.Group)
	}
	// A rank with blocks on a GPU keeps its CPU blocks' weights in ggml's
	// plain layout: with a GPU in the scheduler, ggml can assign a CPU
	// weight's product to the GPU (a large batch's, or one whose
	// activations the CPU's repacked kernels do not take), and copying a
	// repacked weight there crashed (its buffer cannot be read back:
	// repack.cpp's get_tensor is nil). Those large products run on the GPU
	// anyway; a CPU block's decode loses the tiled kernels.
	if !opts.NoRepack && plan.empty() {
		if err := r.repack(f); err != nil {
			r.Close()
			return nil, err
		}
	}
	kvType := ml.DTypeF16
	if opts.KVType == "f32" {
		kvType = ml.DTypeF32
	}
	// One pool of ContextLen cells for all the sequences (ollama sizes it
	// by its maxSequences argument: 1), so that the memory does not grow
	// with Parallel; the runner's scheduler shares it out. A sliding
	// window's cache holds a window per sequence.
	global := kvcache.NewCausalCache(r.shift)
	global.Init(b, kvType, 1, opts.ContextLen, opts.BatchSize)
	r.cache = global
	if cfg.SlidingWindow > 0 {
		// ollama's window keeps positions p-w..p (w+1 of them); llama.cpp's
		// and Gemma's keep the last SlidingWindow, p-SlidingWindow+1..p.
		local := kvcache.NewSWACache(int32(cfg.SlidingWindow-1), r.shift)
		local.Init(b, kvType, opts.Parallel, opts.ContextLen, opts.BatchSize)
		r.swa = kvcache.NewWrapperCache(local, global)
		r.cache = r.swa
	}
	if !plan.empty() {
		if err := r.reserve(); err != nil {
			r.Close()
			return nil, err
		}
	}
	r.offload = offloadOf(plan, opts.LastLayer-opts.FirstLayer, b.BackendMemory())
	return r, nil
}

// newBackend creates the ggml backend with gpus' layers on their device,
// turning its panics (on some malformed files, and ml.ErrNoMem when a
// buffer cannot be allocated) into errors.
func newBackend(path string, threads int, fa ml.FlashAttentionType, gpus ml.GPULayersList) (b ml.Backend, err error) {
	defer func() { err = recovered(recover(), err) }()
	return ml.NewBackend(path, ml.BackendParams{AllocMemory: true, NumThreads: threads, FlashAttention: fa, GPULayers: gpus})
}

// recovered turns a panic's value into an error (keeping an error's type:
// ml.ErrNoMem), or returns err when there was none.
func recovered(p any, err error) error {
	switch p := p.(type) {
	case nil:
		return err
	case error:
		return p
	}
	return fmt.Errorf("%v", p)
}
