package ggml

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model/input"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Offload: a rank puts as many of its blocks on the node's GPU as fit,
// weights, KV cache and compute buffers; the rest stay on the CPU. As
// llama.cpp's -ngl, the last blocks go first, and the output head only
// once every block is there; the token embeddings stay on the CPU (ollama
// puts them there whatever it is asked). The device is one of ggml's
// registry (ml.Backend.BackendDevices): a layer given an id that matches
// nothing would silently stay on the CPU.

// ErrGPUFit is wrapped when a rank is asked for more GPU blocks than fit.
var ErrGPUFit = errors.New("does not fit the GPU")

// gpuPlan is what a rank puts on a GPU.
type gpuPlan struct {
	dev    runnerapi.Device
	blocks []int // block indices, ascending: the rank's last ones
	head   bool
	// reason says why there are fewer blocks than the rank holds (no GPU,
	// short of memory), for Offload.
	reason string
}

func (p gpuPlan) empty() bool { return len(p.blocks) == 0 && !p.head }

// list is the plan as ollama's backend takes it: block indices, and the
// model's block count for the head.
func (p gpuPlan) list(cfg model.Config) ml.GPULayersList {
	if p.empty() {
		return nil
	}
	ls := slices.Clone(p.blocks)
	if p.head {
		// ollama's loader puts the head after every block the file
		// states, glm4moe's multi-token-prediction ones included.
		ls = append(ls, cfg.FileBlocks())
	}
	return ml.GPULayersList{{DeviceID: ml.DeviceID{ID: p.dev.ID, Library: p.dev.Library}, Layers: ls}}
}

// onGPU reports whether block il is on the GPU.
func (p gpuPlan) onGPU(il int) bool { return slices.Contains(p.blocks, il) }

// fewer is the plan with about a quarter fewer blocks (at least one less;
// the head goes first): what a load short of device memory retries with.
func (p gpuPlan) fewer() gpuPlan {
	q := p
	q.blocks = slices.Clone(p.blocks)
	if q.head {
		q.head = false
		return q
	}
	drop := max(1, len(q.blocks)/4)
	q.blocks = q.blocks[min(drop, len(q.blocks)):]
	return q
}

// deviceOf is ollama's description of a device as Orrery publishes it.
func deviceOf(d ml.DeviceInfo) runnerapi.Device {
	return runnerapi.Device{ID: d.ID, Library: d.Library, Name: d.Name, Description: d.Description,
		TotalBytes: d.TotalMemory, FreeBytes: d.FreeMemory,
		Unified: d.Integrated || d.Library == "Metal", Software: runnerapi.IsSoftware(d.Description)}
}

// probe is a backend of the model at path that allocates nothing: its
// devices and the memory a layout would take (ollama's createLayout does
// the same).
func probe(path string, gpus ml.GPULayersList) (b ml.Backend, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return ml.NewBackend(path, ml.BackendParams{AllocMemory: false, NumThreads: 1, GPULayers: gpus})
}

// Devices lists the GPUs ggml sees on this machine (the model at path is
// read for its header only: ollama's API lists devices through a model).
// Setup must have run first.
func Devices(path string) ([]runnerapi.Device, error) {
	b, err := probe(path, nil)
	if err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	defer b.Close()
	var out []runnerapi.Device
	for _, d := range b.BackendDevices() {
		out = append(out, deviceOf(d))
	}
	return out, nil
}

// ListDevices lists the GPUs ggml sees, through a one-tensor file it
// writes in dir for the purpose. Setup must have run first.
func ListDevices(dir string) ([]runnerapi.Device, error) {
	f, err := os.CreateTemp(dir, "gpu-list-*.gguf")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	const arch = "orrery-gpu-list"
	kvs := []gguf.KV{{Key: "general.architecture", Value: arch}, {Key: arch + ".block_count", Value: uint32(1)}}
	ts := []gguf.WriteTensor{{Name: "blk.0.w", Type: gguf.F32, Dims: []uint64{32, 1},
		Data: func(w io.Writer) error { return pattern(w, 32*4) }}}
	if err := gguf.WriteFile(path, kvs, ts); err != nil {
		return nil, err
	}
	return Devices(path)
}

// blockNeed is what a rank's blocks take on a device: each block's
// weights and KV cache (by block index), the head's weights, and the
// compute buffers.
type blockNeed struct {
	block map[int]uint64
	head  uint64
	graph uint64
}

// measure asks ollama what the rank's blocks and head weigh on dev (its
// buffers pad them), and adds each block's KV cache and the compute
// buffers, estimated: a batch's activations through one block and the
// head's logits, and a margin (the load that follows checks it for real:
// see reserve).
func measure(path string, cfg model.Config, opts backend.Options, dev runnerapi.Device) (blockNeed, error) {
	all := gpuPlan{dev: dev, head: cfg.HasHead(opts.LastLayer)}
	for il := opts.FirstLayer; il < opts.LastLayer; il++ {
		all.blocks = append(all.blocks, il)
	}
	b, err := probe(path, all.list(cfg))
	if err != nil {
		return blockNeed{}, fmt.Errorf("size the GPU layout: %w", err)
	}
	defer b.Close()
	mem := b.BackendMemory()
	var on *ml.DeviceMemory
	for i := range mem.GPUs {
		if mem.GPUs[i].ID == dev.ID && mem.GPUs[i].Library == dev.Library {
			on = &mem.GPUs[i]
		}
	}
	if on == nil {
		return blockNeed{}, fmt.Errorf("device %s is not among ggml's", dev)
	}
	elem := 2
	if opts.KVType == "f32" {
		elem = 4
	}
	kvShare := 1.0 // a tensor-parallel slice caches its kv heads' share
	if s := cfg.TP; s != nil && !cfg.MLA && s.FullKVHeads > 0 {
		kvShare = float64(s.KVHeads) / float64(s.FullKVHeads)
	}
	need := blockNeed{block: map[int]uint64{}}
	for _, il := range all.blocks {
		kv := float64(cfg.KVBytes(il, opts.ContextLen, opts.Parallel, opts.BatchSize, elem)) * kvShare
		need.block[il] = at(on.Weights, il) + uint64(kv)
	}
	if all.head {
		need.head = at(on.Weights, cfg.FileBlocks())
	}
	ff := max(cfg.FFDim, cfg.ExpertFFDim*max(cfg.ExpertsUsed, 1))
	need.graph = uint64(opts.BatchSize)*4*uint64(8*cfg.Dim+3*ff) + graphMargin
	if all.head {
		rows := min(opts.BatchSize, opts.Parallel*(runnerapi.MaxDraft+1))
		need.graph += uint64(rows) * 4 * uint64(cfg.Vocab)
	}
	return need, nil
}

// graphMargin is kept free on a device beyond the estimate: the driver's
// own buffers, and what the estimate misses.
const graphMargin = 128 << 20

func at(s []uint64, i int) uint64 {
	if i >= 0 && i < len(s) {
		return s[i]
	}
	return 0
}

// fit is how many of the rank's last blocks (and the head, once all fit)
// fit in free bytes after the compute buffers.
func (n blockNeed) fit(blocks []int, free uint64) (int, bool) {
	if free <= n.graph {
		return 0, false
	}
	left := free - n.graph
	k := 0
	for i := len(blocks) - 1; i >= 0; i-- {
		b := n.block[blocks[i]]
		if b > left {
			return k, false
		}
		left -= b
		k++
	}
	return k, n.head > 0 && n.head <= left
}

// planGPU decides what the rank puts on a GPU: nothing when it is asked
// for none or no device is allowed (the reason says which), else its last
// blocks, as many as fit or as asked. Asked for more than fit, it fails
// with ErrGPUFit, naming the device and its free memory.
func planGPU(path string, f *gguf.File, cfg model.Config, opts backend.Options) (gpuPlan, error) {
	if opts.GPULayers == 0 {
		return gpuPlan{reason: "--gpu-layers 0"}, nil
	}
	ds, err := Devices(path)
	if err != nil {
		return gpuPlan{}, err
	}
	dev, err := pickDevice(ds, opts.GPUSoftware, opts.GPUDevice)
	if err != nil {
		return gpuPlan{reason: err.Error()}, nil
	}
	if why := unsupported(f, cfg, dev); why != "" {
		if opts.GPULayers > 0 {
			return gpuPlan{}, fmt.Errorf("%w: %s", ErrGPUFit, why)
		}
		return gpuPlan{reason: why}, nil
	}
	need, err := measure(path, cfg, opts, dev)
	if err != nil {
		return gpuPlan{}, err
	}
	return choose(dev, need, opts, cfg.HasHead(opts.LastLayer))
}

// choose is planGPU's decision once the device is picked and the rank's
// needs on it measured: the last blocks that fit what the device has free
// (or opts.GPUMemory, when less), and the head (hasHead: the rank has it)
// once all of them do; with a number of blocks asked, that many, or
// ErrGPUFit when they do not fit.
func choose(dev runnerapi.Device, need blockNeed, opts backend.Options, hasHead bool) (gpuPlan, error) {
	var blocks []int
	for il := opts.FirstLayer; il < opts.LastLayer; il++ {
		blocks = append(blocks, il)
	}
	// What the rank may take of the device (dev keeps what it has free,
	// as Offload publishes it).
	free, room := dev.FreeBytes, "free"
	if opts.GPUMemory > 0 && opts.GPUMemory < free {
		free, room = opts.GPUMemory, "allowed by --gpu-memory"
	}
	k, head := need.fit(blocks, free)
	head = head && hasHead
	total := len(blocks)
	if hasHead {
		total++ // the head counts as one more, as in llama.cpp's -ngl
	}
	got := k
	if head {
		got++
	}
	p := gpuPlan{dev: dev}
	if want := int(opts.GPULayers); opts.GPULayers > 0 {
		want = min(want, total)
		if want > got {
			return gpuPlan{}, fmt.Errorf("%w: %d blocks asked for %s, which has %.2f GiB %s: %d fit", ErrGPUFit, want, dev, gib(free), room, got)
		}
		got = want
	}
	if got > len(blocks) {
		p.head = true
	}
	p.blocks = blocks[len(blocks)-min(got, len(blocks)):]
	if got < total {
		p.reason = fmt.Sprintf("%d of %d fit %s's %.2f GiB %s", got, total, dev.Name, gib(free), room)
		if opts.GPULayers > 0 {
			p.reason = fmt.Sprintf("--gpu-layers %d", opts.GPULayers)
		}
	}
	return p, nil
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

// unsupported says why a model's blocks must not go on dev, or "": on
// Vulkan, deepseek2's latent attention with its absorbed matrices
// (attn_k_b, attn_v_b: batched 3D products) in a K-quant came out wrong
// on lavapipe, top-1 agreement with the CPU 3–6 % where the same model
// with those two in Q8_0 agrees as its routing allows (docs/conformance.md);
// ggml's Vulkan shaders are the same on a real device.
func unsupported(f *gguf.File, cfg model.Config, dev runnerapi.Device) string {
	if dev.Library != "Vulkan" || !cfg.MLA || f == nil {
		return ""
	}
	for _, t := range f.Tensors {
		if (strings.HasSuffix(t.Name, ".attn_k_b.weight") || strings.HasSuffix(t.Name, ".attn_v_b.weight")) && strings.HasSuffix(t.Type.String(), "_K") {
			return fmt.Sprintf("%s is %s, whose batched product ggml's Vulkan shaders compute wrong: the blocks stay on the CPU", t.Name, t.Type)
		}
	}
	return ""
}

// offloadOf is a loaded rank's Offload: its total blocks, and what ggml
// allocated where.
func offloadOf(p gpuPlan, total int, mem ml.BackendMemory) runnerapi.Offload {
	o := runnerapi.Offload{Blocks: len(p.blocks), Total: total, Head: p.head, Reason: p.reason}
	if !p.empty() {
		d := p.dev
		o.Device = &d
	}
	o.CPUBytes = mem.InputWeights + mem.CPU.Size()
	for _, g := range mem.GPUs {
		o.GPUBytes += g.Size()
	}
	return o
}

// reserve sizes the compute buffers for the largest batch (BatchSize rows,
// and the logits of as many rows as speculation verifies) without
// computing, and so allocates the KV cache of every block too (the cache
// makes a layer's at its first use): a device short of memory fails here,
// at load, with ml.ErrNoMem, and not at a request. ollama's runner reserves
// the same way. A tensor-parallel slice's all-reduces are in the graph
// but not run.
func (r *Rank) reserve() (err error) {
	defer func() { err = recovered(recover(), err) }()
	n := r.opts.BatchSize
	c := r.b.NewContext()
	defer c.Close()
	pos, seqs := make([]int32, n), make([]int, n)
	for i := range pos {
		pos[i] = int32(i)
	}
	ins := inputs{positions: c.Input().FromInts(pos, n), n: n}
	if r.cfg.AttnTempScale != 0 {
		ins.attnTemp = c.Input().FromFloats(make([]float32, n), 1, 1, n)
	}
	var h ml.Tensor
	if r.opts.FirstLayer == 0 {
		h = r.tokEmb.Rows(c, c.Input().FromInts(make([]int32, n), n))
	} else {
		h = c.Input().FromFloats(make([]float32, n*r.cfg.Dim), r.cfg.Dim, n)
	}
	if err := r.cache.StartForward(c, input.Batch{Positions: pos, Sequences: seqs}, true); err != nil {
		return fmt.Errorf("kv cache: %w", err)
	}
	for i := range r.layers {
		il := r.opts.FirstLayer + i
		r.cache.SetLayer(il)
		if r.swa != nil {
			typ := globalLayer
			if r.cfg.IsSWA(il) {
				typ = swaLayer
			}
			r.swa.SetLayerType(typ)
		}
		h = r.block(c, il, &r.layers[i], h, &ins)
	}
	if r.out != nil {
		rows := min(n, r.opts.Parallel*(runnerapi.MaxDraft+1))
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32(i)
		}
		h = h.Rows(c, c.Input().FromInts(ids, rows)).RMSNorm(c, r.outNorm, float32(r.cfg.Eps))
		h = r.out.Mulmat(c, h)
	}
	c.Forward(h).Reserve()
	return nil
}
