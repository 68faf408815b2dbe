package placement

import (
	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A rank on a node with a GPU puts its last blocks there, as many as fit
// the device's free memory after its compute buffers, and its output head
// too once every block is there: what the runner does with --gpu-layers
// auto (engine/backend/ggml's offload.go). Placement predicts that split
// from the model's header and the device its node publishes, so that
// the memory check and the cost model count what the runner will load:
//
//   - on a discrete GPU, the blocks there take the device's memory, not
//     RAM: the node holds its available RAM plus the device's free bytes;
//   - with unified memory (Apple silicon, integrated GPUs) they are the
//     same RAM, counted once; the device's free bytes (Metal's working-set
//     limit) only cap how much of it the GPU computes on.

// gpuGraphMargin is what a rank keeps free on a device beyond its
// estimated compute buffers, as the runner's offload does.
const gpuGraphMargin = 128 << 20

// gpuGraphOf is the compute buffers a rank of cfg needs on a GPU (a
// batch's activations through one block), and the logits' when it holds
// the head: the runner's estimate (offload.go's measure).
func gpuGraphOf(cfg model.Config, parallel int) (graph, logits uint64) {
	batch := uint64(backend.DefaultBatchSize)
	ff := max(cfg.FFDim, cfg.ExpertFFDim*max(cfg.ExpertsUsed, 1))
	graph = batch*4*uint64(8*cfg.Dim+3*ff) + gpuGraphMargin
	rows := min(batch, uint64(max(parallel, 1)*(runnerapi.MaxDraft+1)))
	return graph, rows * 4 * uint64(cfg.Vocab)
}

// rankMem is where a rank's memory goes on its node.
type rankMem struct {
	gpuBlocks int  // its last gpuBlocks blocks on the GPU
	gpuHead   bool // and the head
	// ram is what the rank needs of the node's RAM (all of it on a node
	// without a GPU or with unified memory), gpu what the GPU holds.
	ram, gpu uint64
}

// rankNeed is what one rank needs, before it is put on a node: each of
// its blocks (weights and KV cache, its share of them in a group), the
// head's bytes in RAM and on a GPU (a tied head takes its own copy of the
// embeddings there; 0: not this rank's), and what stays in RAM whatever
// (the overhead, the token embeddings).
type rankNeed struct {
	blocks           []uint64
	headRAM, headGPU uint64
	hasHead          bool
	base             uint64
}

func (r rankNeed) total() uint64 {
	t := r.base + r.headRAM
	for _, b := range r.blocks {
		t += b
	}
	return t
}

// fit places need on node n: on the GPU its last blocks that fit after
// the compute buffers (graph, and logits with the head), and the head
// when every block fits and it does too.
func (n Node) fit(need rankNeed, graph, logits uint64) rankMem {
	total := need.total()
	m := rankMem{ram: total}
	if n.GPU == nil {
		return m
	}
	free := n.GPU.FreeBytes
	if n.GPU.Unified {
		free = min(free, n.Available) // the GPU's share of the RAM left
	}
	if need.hasHead {
		graph += logits
	}
	if free <= graph {
		return m
	}
	left := free - graph
	var on uint64
	for i := len(need.blocks) - 1; i >= 0 && need.blocks[i] <= left; i-- {
		left -= need.blocks[i]
		on += need.blocks[i]
		m.gpuBlocks++
	}
	if m.gpuBlocks == len(need.blocks) && need.hasHead && need.headGPU <= left {
		m.gpuHead = true
		on += need.headGPU
	}
	if m.gpuBlocks == 0 && !m.gpuHead {
		return m
	}
	m.gpu = graph + on
	if n.GPU.Unified {
		if m.gpuHead { // the head's copy of tied embeddings, in the same RAM
			m.ram += need.headGPU - need.headRAM
		}
		return m
	}
	m.ram = total - on
	if m.gpuHead {
		m.ram = total - (on - need.headGPU) - need.headRAM
	}
	return m
}

// capacity is what a node holds for Split's proportions: its available
// RAM, and a discrete GPU's free memory beside it.
func (n Node) capacity() uint64 {
	if n.GPU == nil || n.GPU.Unified {
		return n.Available
	}
	return n.Available + n.GPU.FreeBytes
}

// setMem records m on rank r (the GPU's blocks, and what it needs of RAM).
func (r *Rank) setMem(n Node, m rankMem) {
	r.Need = m.ram
	if n.GPU == nil {
		return
	}
	d := *n.GPU
	r.GPU = &d
	r.GPUBlocks, r.GPUHead, r.GPUNeed = m.gpuBlocks, m.gpuHead, m.gpu
	r.CPUBlocks = r.LastLayer - r.FirstLayer - m.gpuBlocks
}

// need is what a pipeline rank holding blocks [first, last) needs.
func (l Layout) need(first, last int) rankNeed {
	n := rankNeed{base: Overhead}
	for i := first; i < last; i++ {
		n.blocks = append(n.blocks, l.Block[i]+l.KV[i])
	}
	if first == 0 {
		n.base += l.Embed
	}
	if last == l.Layers {
		n.hasHead = true
		n.headRAM, n.headGPU = l.Head, l.Head
		if l.Tied {
			n.headGPU += l.Embed
			if first != 0 {
				n.headRAM += l.Embed
			}
		}
	}
	return n
}
