package model

import (
	"fmt"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// What a rank's file holds of the model, as FromGGUF reads it back: the
// keys engine/split writes into a pipeline shard and a tensor-parallel
// slice, and the slice's description (TPSlice).

// Shard metadata keys: a shard keeps the model's metadata and tensor names
// and adds these, so that a rank (and FromGGUF) knows which blocks it holds.
const (
	KeyShardFirst  = "orrery.shard.first_layer"
	KeyShardLast   = "orrery.shard.last_layer"
	KeyShardTied   = "orrery.shard.tied_output"
	KeyShardSource = "orrery.shard.source_sha256"
)

// Tensor parallelism: each rank of a group of T holds a slice of every
// block: a range of attention heads (their q, k and v rows, their columns
// of the output projection, their KV cache) and a range of the MLP's
// hidden columns (gate and up rows, down columns). Each rank's output
// projections then give a partial sum of the block's output, which the
// group adds up (an all-reduce) twice per block. Norms, biases added after
// the sum and the embeddings are replicated; the output head is on rank 0
// only, which samples.
//
// A mixture of experts splits its experts instead (expert parallelism):
// each rank holds a range of whole experts, with their biases, and the
// router whole. Every rank routes every token to the same experts (the
// all-reduced input is the same on all ranks, to the bit), computes those
// it holds, and the same all-reduce adds them up: exact, no expert is
// masked.
//
// A slice is written (engine/split's WriteTPSlice) as a GGUF file that
// keeps the tensors' names, with the orrery.tp keys: FromGGUF reads such
// a file's Heads, KVHeads and FFDim as the rank's own, and TP says where
// they sit in the model.

// Tensor-parallel metadata keys of a slice file.
const (
	KeyTPRank    = "orrery.tp.rank"
	KeyTPRanks   = "orrery.tp.ranks"
	KeyTPHead    = "orrery.tp.head_first"
	KeyTPHeads   = "orrery.tp.heads"
	KeyTPKVHead  = "orrery.tp.kv_head_first"
	KeyTPKVHeads = "orrery.tp.kv_heads"
	KeyTPFF      = "orrery.tp.ff_first"
	KeyTPFFDim   = "orrery.tp.ff"
	// KeyTPFull* are the whole model's counts, for checks and display.
	KeyTPFullHeads   = "orrery.tp.full_heads"
	KeyTPFullKVHeads = "orrery.tp.full_kv_heads"
	KeyTPFullFF      = "orrery.tp.full_ff"
	// Expert parallelism: the slice's experts [first, first+n) of full.
	KeyTPExpert      = "orrery.tp.expert_first"
	KeyTPExperts     = "orrery.tp.experts"
	KeyTPFullExperts = "orrery.tp.full_experts"
	// KeyTPExpertColumns, true, says the experts are split by columns:
	// the slice holds every expert's columns [ff_first, ff_first+ff) of
	// full_ff, the experts' hidden size.
	KeyTPExpertColumns = "orrery.tp.expert_columns"
	// The output head's rows (vocabulary) the slice holds.
	KeyTPVocabFirst = "orrery.tp.vocab_first"
	KeyTPVocabRows  = "orrery.tp.vocab_rows"
	// deepseek2's shared experts, split by columns: [first, first+ff) of
	// full, their hidden size.
	KeyTPSharedFirst  = "orrery.tp.shared_ff_first"
	KeyTPSharedFF     = "orrery.tp.shared_ff"
	KeyTPFullSharedFF = "orrery.tp.full_shared_ff"
)

// MaxTPRanks bounds a tensor-parallel group (runnerapi.Shape's bound).
const MaxTPRanks = runnerapi.MaxTensor

// TPSlice is what rank Rank of a Ranks-way tensor-parallel group holds of
// each block: query heads [Head, Head+Heads), kv heads [KVHead,
// KVHead+KVHeads) (shared with other ranks when the model has fewer kv
// heads than ranks), MLP columns [FF, FF+FFDim), and of a mixture of
// experts, experts [Expert, Expert+Experts) (FF then covers the whole MLP,
// which no block of such a model has) or, with ExpertColumns, every
// expert's columns [FF, FF+FFDim) of FullFF, the experts' hidden size.
type TPSlice struct {
	Rank          int  `json:"rank"`
	Ranks         int  `json:"ranks"`
	Head          int  `json:"headFirst"`
	Heads         int  `json:"heads"`
	KVHead        int  `json:"kvHeadFirst"`
	KVHeads       int  `json:"kvHeads"`
	FF            int  `json:"ffFirst"`
	FFDim         int  `json:"ff"`
	Expert        int  `json:"expertFirst,omitempty"`
	Experts       int  `json:"experts,omitempty"`
	ExpertColumns bool `json:"expertColumns,omitempty"`
	// Rows [VocabFirst, VocabFirst+VocabRows) of the output head (the
	// vocabulary), which every rank applies, the logits then gathered;
	// VocabRows 0: the head is whole on rank 0.
	VocabFirst int `json:"vocabFirst,omitempty"`
	VocabRows  int `json:"vocabRows,omitempty"`
	// Columns [Shared, Shared+SharedFF) of FullSharedFF, the hidden size
	// of deepseek2's shared experts (beside the routed ones, which every
	// token uses): split as a dense MLP. FullSharedFF 0: none.
	Shared       int `json:"sharedFfFirst,omitempty"`
	SharedFF     int `json:"sharedFf,omitempty"`
	FullSharedFF int `json:"fullSharedFf,omitempty"`
	// The whole model's counts.
	FullHeads   int `json:"fullHeads"`
	FullKVHeads int `json:"fullKvHeads"`
	FullFF      int `json:"fullFf"`
	FullExperts int `json:"fullExperts,omitempty"`
}

// String says what the slice holds of each block, for people: "heads
// 0–7 of 16 (kv 0–1 of 4), MLP columns 0–4095 of 8192", or the experts.
func (s TPSlice) String() string {
	b := fmt.Sprintf("heads %d–%d of %d (kv %d–%d of %d)", s.Head, s.Head+s.Heads-1, s.FullHeads, s.KVHead, s.KVHead+s.KVHeads-1, s.FullKVHeads)
	switch {
	case s.ExpertColumns:
		b += fmt.Sprintf(", every expert's columns %d–%d of %d", s.FF, s.FF+s.FFDim-1, s.FullFF)
	case s.FullExperts > 0:
		if s.FFDim < s.FullFF { // deepseek2's leading dense blocks
			b += fmt.Sprintf(", dense MLP columns %d–%d of %d", s.FF, s.FF+s.FFDim-1, s.FullFF)
		}
		b += fmt.Sprintf(", experts %d–%d of %d", s.Expert, s.Expert+s.Experts-1, s.FullExperts)
	default:
		b += fmt.Sprintf(", MLP columns %d–%d of %d", s.FF, s.FF+s.FFDim-1, s.FullFF)
	}
	if s.FullSharedFF > 0 {
		b += fmt.Sprintf(", shared experts' columns %d–%d of %d", s.Shared, s.Shared+s.SharedFF-1, s.FullSharedFF)
	}
	if s.VocabRows > 0 {
		b += fmt.Sprintf(", head rows %d–%d", s.VocabFirst, s.VocabFirst+s.VocabRows-1)
	}
	return b
}

// readTP reads a slice file's orrery.tp keys (none: a whole model) into
// c.TP, and makes the slice's heads and MLP columns c's own. It runs after
// the hyperparameters are read, so that HeadDim is the model's.
func readTP(c *Config, f *gguf.File) error {
	if _, ok := f.Get(KeyTPRanks); !ok {
		return nil
	}
	g := func(k string) int { return int(f.Uint(k, 0)) }
	s := &TPSlice{Rank: g(KeyTPRank), Ranks: g(KeyTPRanks), Head: g(KeyTPHead), Heads: g(KeyTPHeads), KVHead: g(KeyTPKVHead),
		KVHeads: g(KeyTPKVHeads), FF: g(KeyTPFF), FFDim: g(KeyTPFFDim), FullHeads: g(KeyTPFullHeads), FullKVHeads: g(KeyTPFullKVHeads), FullFF: g(KeyTPFullFF),
		Expert: g(KeyTPExpert), Experts: g(KeyTPExperts), FullExperts: g(KeyTPFullExperts), ExpertColumns: f.Bool(KeyTPExpertColumns, false),
		VocabFirst: g(KeyTPVocabFirst), VocabRows: g(KeyTPVocabRows),
		Shared: g(KeyTPSharedFirst), SharedFF: g(KeyTPSharedFF), FullSharedFF: g(KeyTPFullSharedFF)}
	ff := c.FFDim // what the slice's columns are of
	if s.ExpertColumns {
		ff = c.ExpertFFDim
	}
	switch {
	case s.Ranks < 2 || s.Ranks > MaxTPRanks || s.Rank < 0 || s.Rank >= s.Ranks:
		return fmt.Errorf("tensor-parallel slice: rank %d of %d", s.Rank, s.Ranks)
	case s.FullHeads != c.Heads || s.FullKVHeads != c.KVHeads || s.FullFF != ff:
		return fmt.Errorf("tensor-parallel slice of %d/%d heads and ff %d, but the model has %d/%d and %d", s.FullHeads, s.FullKVHeads, s.FullFF, c.Heads, c.KVHeads, ff)
	case s.Heads < 1 || s.Head < 0 || s.Head+s.Heads > c.Heads || s.KVHeads < 1 || s.KVHead < 0 || s.KVHead+s.KVHeads > c.KVHeads:
		return fmt.Errorf("tensor-parallel slice: heads [%d, +%d) and kv heads [%d, +%d) of %d/%d", s.Head, s.Heads, s.KVHead, s.KVHeads, c.Heads, c.KVHeads)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("tensor-parallel slice: %d kv heads do not divide %d heads", s.KVHeads, s.Heads)
	case s.FFDim < 1 || s.FF < 0 || s.FF+s.FFDim > ff:
		return fmt.Errorf("tensor-parallel slice: MLP columns [%d, +%d) of %d", s.FF, s.FFDim, ff)
	case c.MLA && (s.KVHead != 0 || s.KVHeads != 1):
		return fmt.Errorf("tensor-parallel slice of %s's latent attention with kv heads [%d, +%d): its one latent is on every rank", c.Arch, s.KVHead, s.KVHeads)
	case s.FullSharedFF != c.SharedFF(): // c.TP is not set yet: the model's
		return fmt.Errorf("tensor-parallel slice of shared experts of %d columns, but the model's are %d", s.FullSharedFF, c.SharedFF())
	case s.FullSharedFF > 0 && (s.SharedFF < 1 || s.Shared < 0 || s.Shared+s.SharedFF > s.FullSharedFF):
		return fmt.Errorf("tensor-parallel slice: shared experts' columns [%d, +%d) of %d", s.Shared, s.SharedFF, s.FullSharedFF)
	case s.ExpertColumns && c.LeadDense > 0:
		return fmt.Errorf("tensor-parallel slice of %s's experts by columns: they split whole only", c.Arch)
	case s.FullExperts != c.Experts:
		return fmt.Errorf("tensor-parallel slice of %d experts, but the model has %d", s.FullExperts, c.Experts)
	case c.Experts > 0 && (s.Experts < 1 || s.Expert < 0 || s.Expert+s.Experts > c.Experts):
		return fmt.Errorf("tensor-parallel slice: experts [%d, +%d) of %d", s.Expert, s.Experts, c.Experts)
	case s.VocabFirst < 0 || s.VocabRows < 0 || s.VocabFirst+s.VocabRows > c.Vocab:
		return fmt.Errorf("tensor-parallel slice: head rows [%d, +%d) of a %d-token vocabulary", s.VocabFirst, s.VocabRows, c.Vocab)
	case s.ExpertColumns && (c.Experts == 0 || s.Expert != 0 || s.Experts != c.Experts):
		return fmt.Errorf("tensor-parallel slice of expert columns, of experts [%d, +%d) of %d", s.Expert, s.Experts, c.Experts)
	}
	c.TP = s
	c.Heads, c.KVHeads = s.Heads, s.KVHeads
	if s.ExpertColumns {
		c.ExpertFFDim = s.FFDim
	} else {
		c.FFDim = s.FFDim
	}
	return nil
}

// SharedFF is the hidden size of the shared experts this file holds: a
// slice's columns, or all.
func (c Config) SharedFF() int {
	if c.TP != nil && c.TP.FullSharedFF > 0 {
		return c.TP.SharedFF
	}
	return c.SharedExperts * c.ExpertFFDim
}

// LocalExperts is the range of experts this file holds: a slice's, or all.
func (c Config) LocalExperts() (first, n int) {
	if c.TP != nil && c.TP.FullExperts > 0 {
		return c.TP.Expert, c.TP.Experts
	}
	return 0, c.Experts
}

// HasHead reports whether this file's rank applies the output head: the
// last block's rank, and in a tensor-parallel group every rank (its rows
// of the head) or, with the head whole, only rank 0.
func (c Config) HasHead(last int) bool {
	return last == c.Layers && (c.TP == nil || c.TP.Rank == 0 || c.TP.VocabRows > 0)
}
