// Package placement splits a model's blocks across nodes: contiguous
// layer ranges in proportion to each node's available memory (a discrete
// GPU's free memory counted beside its RAM), checked against what each
// rank needs (its weights, its KV cache, compute buffers), the blocks a
// GPU holds against the device's memory.
package placement

import (
	"errors"
	"fmt"
	"strings"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Overhead is reserved per rank for compute buffers and the runner
// process itself.
const Overhead = 256 << 20

// ErrNoFit is wrapped when a model does not fit the nodes given.
var ErrNoFit = errors.New("model does not fit")

// Layout is what a model's ranks need, from its GGUF header.
type Layout struct {
	Layers int
	// Block is the weight bytes of each block; Embed of token_embd,
	// Head of output_norm plus the output matrix (0 when tied to Embed).
	Block []uint64
	// Experts is the part of each block's bytes in a mixture's experts
	// (ffn_*_exps), which expert parallelism splits whole.
	Experts []uint64
	// Replicated is the part every rank of a tensor-parallel group holds
	// whole: norms and other vectors, routers, deepseek2's compressions.
	Replicated []uint64
	// Attn is the part split by query heads (the attention's other
	// matrices), KVProj the part split by kv heads (attn_k, attn_v); the
	// rest of a block is its MLP, split by columns.
	Attn, KVProj []uint64
	// HeadNorm is the part of Head in output_norm, which every rank of a
	// group that splits the head holds whole.
	HeadNorm    uint64
	Embed, Head uint64
	Tied        bool
	// KV is each layer's KV cache (f16): the context length for a global
	// layer (one pool for every slot), a window per slot and one batch
	// for a sliding-window one (Gemma 3).
	KV         []uint64
	ContextLen int
	// GPUGraph is the compute buffers a rank needs on a GPU, GPULogits
	// what the head's logits add to them (see gpuGraphOf).
	GPUGraph, GPULogits uint64
}

// LayoutOf reads a model's layout for a context of ctxLen tokens (0: the
// model's) served by parallel slots.
func LayoutOf(f *gguf.File, cfg model.Config, ctxLen, parallel int) Layout {
	if ctxLen <= 0 || ctxLen > cfg.ContextLen {
		ctxLen = cfg.ContextLen
	}
	l := Layout{Layers: cfg.Layers, Block: make([]uint64, cfg.Layers), Experts: make([]uint64, cfg.Layers), Replicated: make([]uint64, cfg.Layers),
		Attn: make([]uint64, cfg.Layers), KVProj: make([]uint64, cfg.Layers), KV: make([]uint64, cfg.Layers),
		Tied: cfg.TiedOutput, ContextLen: ctxLen}
	l.GPUGraph, l.GPULogits = gpuGraphOf(cfg, parallel)
	for i := range l.KV {
		// f16 keys and values (deepseek2's MLA: one latent, narrower
		// values); the slots share one pool of ctxLen positions.
		l.KV[i] = cfg.KVBytes(i, ctxLen, parallel, backend.DefaultBatchSize, 2)
	}
	for _, t := range f.Tensors {
		switch {
		case t.Name == "token_embd.weight":
			l.Embed = t.Size
		case t.Name == "output_norm.weight":
			l.Head += t.Size
			l.HeadNorm = t.Size
		case strings.HasPrefix(t.Name, "output."):
			l.Head += t.Size
		default:
			n, p, ok := blockPart(t, cfg.Layers)
			if !ok {
				continue
			}
			l.Block[n] += t.Size
			switch p { // the MLP's parts are the rest of the block
			case partExperts:
				l.Experts[n] += t.Size
			case partReplicated:
				l.Replicated[n] += t.Size
			case partKV:
				l.KVProj[n] += t.Size
			case partAttn:
				l.Attn[n] += t.Size
			}
		}
	}
	return l
}

// part is how a tensor-parallel group holds one of a block's tensors.
type part int

const (
	partReplicated part = iota // whole on every rank: vectors, routers, deepseek2's compressions
	partAttn                   // by query heads
	partKV                     // by kv heads (attn_k, attn_v)
	partMLP                    // by the MLP's columns
	partShared                 // by deepseek2's shared experts' columns
	partExperts                // a mixture's experts: whole, or every one's columns
)

// blockPart says which of layers blocks t belongs to (blk.N.) and how a
// group splits it; false for a tensor of no block.
func blockPart(t gguf.TensorInfo, layers int) (int, part, bool) {
	var n int
	if !strings.HasPrefix(t.Name, "blk.") {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(t.Name, "blk.%d.", &n); err != nil || n < 0 || n >= layers {
		return 0, 0, false
	}
	switch name := t.Name[strings.Index(t.Name[4:], ".")+5:]; {
	case strings.Contains(name, "_exps"):
		return n, partExperts, true
	case strings.Contains(name, "_shexp"):
		return n, partShared, true
	case len(t.Dims) < 2 || strings.HasPrefix(name, "ffn_gate_inp") || strings.HasPrefix(name, "attn_q_a") ||
		strings.HasPrefix(name, "attn_kv_a"):
		return n, partReplicated, true
	case strings.HasPrefix(name, "attn_k.") || strings.HasPrefix(name, "attn_v."):
		return n, partKV, true
	case strings.HasPrefix(name, "attn_"):
		return n, partAttn, true
	case strings.HasPrefix(name, "ffn_"):
		return n, partMLP, true
	}
	return n, partReplicated, true
}

// Need is what rank [first, last) of n ranks needs in memory.
func (l Layout) Need(first, last int) uint64 {
	need := uint64(Overhead)
	for i := first; i < last; i++ {
		need += l.Block[i] + l.KV[i]
	}
	if first == 0 {
		need += l.Embed
	}
	if last == l.Layers {
		need += l.Head
		if l.Tied && first != 0 {
			need += l.Embed
		}
	}
	return need
}

// Node is a candidate node and the memory it has available.
type Node struct {
	ID        string
	Available uint64
	// GPU is the device the node's ranks offload to (nil: none), with
	// its free memory: see gpu.go.
	GPU *runnerapi.Device
}

// Rank is one rank of a placement.
type Rank struct {
	Rank       int    `json:"rank"`
	NodeID     string `json:"nodeId"`
	FirstLayer int    `json:"firstLayer"`
	LastLayer  int    `json:"lastLayer"`
	// Need is the memory the rank is expected to use; Available is the
	// node's, when placed.
	Need      uint64 `json:"needBytes"`
	Available uint64 `json:"availableBytes"`
	// Slice says what a tensor-parallel rank holds of each block
	// (model.TPSlice's String); "" for a pipeline rank.
	Slice string `json:"slice,omitempty"`
	// On a node with a GPU: the device, the rank's blocks predicted on it
	// (its last GPUBlocks; GPUHead: and the output head) and on the CPU,
	// and what they take of the device's memory (GPUNeed; with unified
	// memory, a part of Need). Need is then what the rank takes of RAM.
	GPU       *runnerapi.Device `json:"gpu,omitempty"`
	GPUBlocks int               `json:"gpuBlocks,omitempty"`
	CPUBlocks int               `json:"cpuBlocks,omitempty"`
	GPUHead   bool              `json:"gpuHead,omitempty"`
	GPUNeed   uint64            `json:"gpuNeedBytes,omitempty"`
}

// onGPU reports whether block il (of the rank's) is predicted on its GPU.
func (r Rank) onGPU(il int) bool {
	return r.GPUBlocks > 0 && il >= r.LastLayer-r.GPUBlocks && il < r.LastLayer
}

// Split places the model on nodes, in that order (rank i on nodes[i]),
// giving each a contiguous range of at least one layer in proportion to
// its available memory. It fails with ErrNoFit, naming each node's need
// and availability, when some rank would not fit.
func Split(l Layout, nodes []Node) ([]Rank, error) {
	n := len(nodes)
	if n == 0 {
		return nil, errors.New("no nodes to place on")
	}
	if n > l.Layers {
		return nil, fmt.Errorf("%d nodes for a %d-layer model: at most one node per layer", n, l.Layers)
	}
	var total uint64
	for _, nd := range nodes {
		total += nd.capacity()
	}
	// Largest remainder over the proportional shares, at least one each.
	counts := make([]int, n)
	rem := make([]float64, n)
	left := l.Layers
	for i, nd := range nodes {
		share := float64(l.Layers) / float64(n)
		if total > 0 {
			share = float64(l.Layers) * float64(nd.capacity()) / float64(total)
		}
		counts[i] = max(1, int(share))
		rem[i] = share - float64(int(share))
		left -= counts[i]
	}
	for left > 0 {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		counts[best]++
		rem[best] = -1
		left--
	}
	for left < 0 { // the minimum of one pushed past the total: take from the largest
		big := 0
		for i := range counts {
			if counts[i] > counts[big] {
				big = i
			}
		}
		counts[big]--
		left++
	}
	return Explicit(l, nodes, counts)
}

// Explicit places counts[i] layers on nodes[i], in order, and checks the
// fit.
func Explicit(l Layout, nodes []Node, counts []int) ([]Rank, error) {
	var ranks []Rank
	var short []string
	first := 0
	if len(counts) != len(nodes) {
		return nil, fmt.Errorf("%d layer counts for %d nodes", len(counts), len(nodes))
	}
	for i, nd := range nodes {
		if counts[i] < 1 || counts[i] > l.Layers-first {
			return nil, fmt.Errorf("rank %d: %d layers from layer %d of a %d-layer model", i, counts[i], first, l.Layers)
		}
		last := first + counts[i]
		r := Rank{Rank: i, NodeID: nd.ID, FirstLayer: first, LastLayer: last, Available: nd.Available}
		r.setMem(nd, nd.fit(l.need(first, last), l.GPUGraph, l.GPULogits))
		if r.Need > r.Available {
			short = append(short, fmt.Sprintf("rank %d on %s needs %.2f GiB for layers [%d, %d)%s, has %.2f GiB available",
				i, nd.ID, gib(r.Need), first, last, r.gpuSays(), gib(r.Available)))
		}
		ranks = append(ranks, r)
		first = last
	}
	if first != l.Layers {
		return nil, fmt.Errorf("ranks cover %d of %d layers", first, l.Layers)
	}
	if len(short) > 0 {
		return ranks, fmt.Errorf("%w: %s", ErrNoFit, strings.Join(short, "; "))
	}
	return ranks, nil
}

// Ranges places explicit layer ranges, which must be contiguous from 0 to
// the last layer.
func Ranges(l Layout, nodes []Node, ranges [][2]int) ([]Rank, error) {
	if len(ranges) != len(nodes) || len(ranges) == 0 {
		return nil, fmt.Errorf("%d ranges for %d nodes", len(ranges), len(nodes))
	}
	counts := make([]int, len(ranges))
	next := 0
	for i, r := range ranges {
		if r[0] != next || r[1] <= r[0] {
			return nil, fmt.Errorf("rank %d: layers [%d, %d) do not continue from layer %d", i, r[0], r[1], next)
		}
		if r[1] > l.Layers {
			return nil, fmt.Errorf("rank %d: layers [%d, %d) of a %d-layer model", i, r[0], r[1], l.Layers)
		}
		counts[i], next = r[1]-r[0], r[1]
	}
	return Explicit(l, nodes, counts)
}

// Preview is one candidate placement: the first k of the nodes.
type Preview struct {
	Nodes int    `json:"nodes"`
	Ranks []Rank `json:"ranks"`
	Fits  bool   `json:"fits"`
	Error string `json:"error,omitempty"`
}

// Previews lists the placements over the first 1…len(nodes) nodes (give
// them best first, e.g. by available memory).
func Previews(l Layout, nodes []Node) []Preview {
	return previews(l, nodes, func(nodes []Node) ([]Rank, error) { return Split(l, nodes) })
}

// Previews lists the pipelines over the first 1…len(nodes) nodes as
// "auto" would place them (Pipeline: split by memory, or by speed).
func (c ModelCost) Previews(l Layout, nodes []Node, in Inputs) []Preview {
	return previews(l, nodes, func(nodes []Node) ([]Rank, error) { return c.Pipeline(l, nodes, in) })
}

func previews(l Layout, nodes []Node, split func([]Node) ([]Rank, error)) []Preview {
	var out []Preview
	for k := 1; k <= len(nodes) && k <= l.Layers; k++ {
		ranks, err := split(nodes[:k])
		p := Preview{Nodes: k, Ranks: ranks, Fits: err == nil}
		if err != nil {
			p.Error = err.Error()
		}
		out = append(out, p)
	}
	return out
}

// Best is the placement over the fewest of nodes (best first) that fits:
// fewer ranks mean fewer hops per token.
func Best(l Layout, nodes []Node) ([]Rank, error) {
	var last error
	for k := 1; k <= len(nodes) && k <= l.Layers; k++ {
		ranks, err := Split(l, nodes[:k])
		if err == nil {
			return ranks, nil
		}
		last = err
	}
	if last == nil {
		last = errors.New("no nodes to place on")
	}
	return nil, fmt.Errorf("%w (tried 1 to %d nodes)", last, min(len(nodes), l.Layers))
}

func gib(n uint64) float64 { return float64(n) / (1 << 30) }

// gpuSays is what a shortfall's message adds for a rank with blocks on a
// GPU: they need no RAM there ("" otherwise).
func (r Rank) gpuSays() string {
	if r.GPU == nil || r.GPUBlocks == 0 || r.GPU.Unified {
		return ""
	}
	return fmt.Sprintf(" beside %d of them on %s (%.2f GiB of its %.2f free)", r.GPUBlocks, r.GPU.Name, gib(r.GPUNeed), gib(r.GPU.FreeBytes))
}
