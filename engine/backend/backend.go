// Package backend is Orrery's small interface to a compute backend: one
// rank's blocks of a model, run a batch at a time with their own KV cache.
// engine/backend/ggml implements it on ggml; tests compare it with a
// pure-Go reference.
package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// DefaultBatchSize is the most tokens one Forward takes when Options do
// not say.
const DefaultBatchSize = 512

// MaxParallel bounds Options.Parallel.
const MaxParallel = 64

// Options say what a rank loads and how it runs.
type Options struct {
	// Threads for the CPU path (0: the backend's default).
	Threads int
	// ContextLen is the KV cache capacity in tokens (0: the model's).
	ContextLen int
	// BatchSize is the most tokens one Forward takes (default 512).
	BatchSize int
	// Parallel is how many sequences the KV cache holds at once (default
	// 1): the runner's slots. They share one pool of ContextLen positions
	// (each sequence up to all of it), so memory does not grow with it.
	Parallel int
	// FirstLayer and LastLayer are the blocks [FirstLayer, LastLayer) this
	// rank holds; LastLayer 0 means all of them. The first rank embeds
	// tokens; the last applies the output head.
	FirstLayer, LastLayer int
	// KVType is the KV cache element type, "f16" (default) or "f32".
	KVType string
	// NoFlashAttention computes attention as separate ops (softmax of
	// QKᵀ, then ·V) instead of ggml's fused flash-attention kernel, which
	// is the default: on the CPU here it made prefill ~10 % and decode
	// ~6 % faster, with the same logits within 1e-6.
	NoFlashAttention bool
	// NoRepack keeps every weight in ggml's plain layout. By default, on
	// x86 CPUs with AVX2, Q4_0, Q4_K and IQ4_NL matrices are repacked into
	// interleaved tiles for ggml's faster matrix kernels, as llama.cpp
	// does (prompts ~2× faster on Q4_K_M here).
	NoRepack bool
	// GPULayers is how many of the rank's blocks go on the node's GPU
	// (runnerapi.GPUAuto: as many as fit). The zero value keeps every
	// block on the CPU; the runner's --gpu-layers defaults to auto.
	GPULayers runnerapi.GPULayers
	// GPUSoftware lets a software device (Mesa's lavapipe) take blocks;
	// otherwise one is never chosen (engine/backend/ggml's GPU setup).
	GPUSoftware bool
	// GPUMemory caps what the rank takes of the device's memory, in bytes
	// (0: all it has free): room left for other programs, or a smaller
	// device's worth in tests.
	GPUMemory uint64
	// GPUDevice is the id of the device to offload to ("": the allowed one
	// with the most free memory): `orrery speed` measures each in turn.
	GPUDevice string
	// Group is the tensor-parallel group of a rank whose file is a
	// tensor-parallel slice (model.Config.TP): it sums each block's
	// partial outputs across the group. Required for such a file.
	Group Collective `json:"-"`
}

// Collective sums vectors across a tensor-parallel group. AllReduce
// replaces buf with the element-wise sum of every rank's buf (all the
// same length), added in rank order so that every rank gets the same
// bits. It is called in order, the same calls on every rank.
type Collective interface {
	AllReduce(buf []float32) error
}

// ExactCollective is a Collective that can also sum exactly where its
// AllReduce rounds the values it sends (a 16-bit wire): gathering a split
// head's logits, each rank's rows among zeros, which rounding would only
// spoil. A Collective without it is taken to sum exactly already.
type ExactCollective interface {
	Collective
	AllReduceExact(buf []float32) error
}

// Resolve fills defaults against the model and checks the range.
func (o *Options) Resolve(c model.Config) error {
	first, last := c.Blocks()
	switch {
	case o.LastLayer == 0 && o.FirstLayer == 0:
		o.FirstLayer, o.LastLayer = first, last
	case o.LastLayer == 0:
		o.LastLayer = last
	}
	if o.FirstLayer < 0 || o.LastLayer > c.Layers || o.FirstLayer >= o.LastLayer {
		return fmt.Errorf("layers [%d, %d) of a %d-layer model", o.FirstLayer, o.LastLayer, c.Layers)
	}
	if o.FirstLayer < first || o.LastLayer > last {
		return fmt.Errorf("layers [%d, %d), but the file holds blocks [%d, %d)", o.FirstLayer, o.LastLayer, first, last)
	}
	if o.ContextLen <= 0 || o.ContextLen > c.ContextLen {
		o.ContextLen = c.ContextLen
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	o.BatchSize = min(o.BatchSize, o.ContextLen)
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.Parallel > MaxParallel {
		return fmt.Errorf("%d parallel sequences, at most %d", o.Parallel, MaxParallel)
	}
	if o.KVType == "" {
		o.KVType = "f16"
	}
	return CheckKVType(o.KVType)
}

// CheckKVType refuses a KV cache type other than f16 and f32.
func CheckKVType(t string) error {
	if t != "f16" && t != "f32" {
		return fmt.Errorf("kv cache type %q: want f16 or f32", t)
	}
	return nil
}

// ErrCannotKeep is wrapped by Remove's error when a sliding-window cache
// no longer holds what keeping the prefix needs: the sequence is then
// forgotten whole.
var ErrCannotKeep = errors.New("cannot keep the cached prefix")

// Batch is one forward step's input: tokens (first rank) or hidden states
// (dim × len(Positions), later ranks), each at its position in its
// sequence.
type Batch struct {
	Tokens    []int32
	Hidden    []float32
	Positions []int32
	// Seqs are the rows' sequences, 0..Parallel-1 (nil: all 0). Rows of
	// one sequence attend to its cached positions and to each other.
	Seqs []int
	// Outputs are the rows whose logits the last rank returns, in order
	// (nil: the last row's; empty: none, when only Embeds are wanted).
	Outputs []int32
	// Embeds are the rows whose hidden states, after the output norm, the
	// last rank returns in Result.Embeds, in order: what an embedding
	// model pools.
	Embeds []int32
	// AllLogits asks the last rank for every position's logits, not just
	// the last one's (tests).
	AllLogits bool
}

// Result is a forward step's output: logits (vocab per output position)
// on the last rank, hidden states (dim × positions) on the others.
type Result struct {
	Logits []float32
	Hidden []float32
	// Embeds are the normed hidden states of Batch.Embeds (dim per row),
	// on the last rank.
	Embeds []float32
}

// Rank is one rank's loaded blocks. Its methods are not safe for
// concurrent use: one Forward runs at a time.
type Rank interface {
	Config() model.Config
	Options() Options
	// Forward runs one batch; each sequence's positions continue its
	// cache (0 after Reset or Remove(seq, 0)).
	Forward(ctx context.Context, b Batch) (Result, error)
	// Remove forgets sequence seq's cached positions from `from` on, and
	// keeps the ones before (a prompt's cached prefix).
	Remove(seq, from int) error
	// Shift drops seq's positions [keep, keep+discard) and moves the
	// later ones down by discard (a context shift).
	Shift(seq, keep, discard int) error
	// Reset forgets every sequence's cache.
	Reset() error
	// Offload says where the rank's blocks went: how many on a GPU.
	Offload() runnerapi.Offload
	Close()
}
