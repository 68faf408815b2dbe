package model

import (
	"errors"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
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
// A slice is written as a GGUF file that keeps the tensors' names, with
// the orrery.tp keys: FromGGUF reads such a file's Heads, KVHeads and
// FFDim as the rank's own, and TP says where they sit in the model.

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

// ErrTPSplit is wrapped by PlanTP's refusals: the model does not split
// that way (the message names the heads, columns or block size).
var ErrTPSplit = errors.New("tensor-parallel split")

// PlanTP splits the blocks of the model (f, cfg: a whole model or a
// pipeline shard) over ranks. Heads go in whole groups of a kv head and
// its queries (GQA); with fewer kv heads than ranks, each kv head is
// replicated on ranks/kv ranks that share its queries. Every boundary
// falls on a quantization block of the output projection and of the MLP's
// down projection (32 values, or 256 for the K-quants), so that their
// rows can be cut into columns. Uneven splits are allowed: 32 heads of 128
// in 8 groups on 3 ranks are 12/12/8. A mixture of experts (every block
// of qwen3moe and gpt-oss) splits every expert's columns evenly where its
// hidden size divides into the ranks' blocks, else its experts whole
// (see ExpertSplit).
func PlanTP(f *gguf.File, cfg Config, ranks int) ([]TPSlice, error) {
	return PlanTPExperts(f, cfg, ranks, ExpertsAuto)
}

// ExpertSplit is how a tensor-parallel group splits a mixture's experts.
type ExpertSplit string

const (
	// ExpertsAuto: by columns where they split evenly, else whole.
	ExpertsAuto ExpertSplit = ""
	// ExpertsWhole: each rank a range of whole experts. A token's chosen
	// experts fall unevenly on the ranks, and the decode step waits for
	// the busiest; the rows of other ranks' experts still cost a few dot
	// products each (localexperts.go), which in a prefill is as many rows
	// as the rank's own.
	ExpertsWhole ExpertSplit = "whole"
	// ExpertsColumns: each rank every expert's range of hidden columns,
	// as a dense MLP: every rank computes every chosen expert on its
	// columns, evenly; gpt-oss's down bias is on rank 0 (zeros on the
	// others). The cut needs the hidden size in whole blocks per rank.
	ExpertsColumns ExpertSplit = "columns"
)

// PlanTPExperts is PlanTP with the experts split as split says.
func PlanTPExperts(f *gguf.File, cfg Config, ranks int, split ExpertSplit) ([]TPSlice, error) {
	switch {
	case ranks < 2 || ranks > MaxTPRanks:
		return nil, fmt.Errorf("%w: %d ranks, want 2..%d", ErrTPSplit, ranks, MaxTPRanks)
	case cfg.TP != nil:
		return nil, fmt.Errorf("%w: the file is itself a tensor-parallel slice", ErrTPSplit)
	case cfg.Experts > 0 && cfg.Experts < ranks:
		return nil, fmt.Errorf("%w: %d experts cannot be split whole over %d ranks", ErrTPSplit, cfg.Experts, ranks)
	case split == ExpertsColumns && cfg.Experts > 0 && cfg.LeadDense > 0:
		return nil, fmt.Errorf("%w: %s's experts split whole only (the MLP columns a rank holds are those of its %d leading dense blocks)", ErrTPSplit, cfg.Arch, cfg.LeadDense)
	}
	out := make([]TPSlice, ranks)
	for r := range out {
		out[r] = TPSlice{Rank: r, Ranks: ranks, FullHeads: cfg.Heads, FullKVHeads: cfg.KVHeads, FullFF: cfg.FFDim}
	}
	splitVocab(cfg.Vocab, out)
	split1 := splitHeads
	if cfg.MLA {
		split1 = splitLatentHeads
	}
	if err := split1(f, cfg, out); err != nil {
		return nil, err
	}
	if cfg.Experts > 0 {
		if cfg.LeadDense > 0 {
			split = ExpertsWhole
		}
		if err := splitExperts(f, cfg, out, split); err != nil {
			return nil, err
		}
		if sh := cfg.SharedFF(); sh > 0 {
			if err := splitColumns(f, cfg, "ffn_down_shexp.weight", sh, out, func(s *TPSlice, at, n int) {
				s.Shared, s.SharedFF, s.FullSharedFF = at, n, sh
			}); err != nil {
				return nil, err
			}
		}
		if cfg.LeadDense == 0 { // no block has a dense MLP
			return out, nil
		}
	}
	// Evenly. (When the output head was on rank 0 alone, giving rank 0
	// fewer columns to offset it only made every block wait for the
	// others: measured no faster on the 1b preset, and prefill slower.)
	if err := splitColumns(f, cfg, "ffn_down.weight", cfg.FFDim, out, func(s *TPSlice, at, n int) { s.FF, s.FFDim = at, n }); err != nil {
		return nil, err
	}
	return out, nil
}

// splitHeads gives each rank a range of the attention's heads (see
// PlanTP).
func splitHeads(f *gguf.File, cfg Config, out []TPSlice) error {
	ranks := len(out)
	oBlock, err := blockOf(f, cfg, "attn_output.weight")
	if err != nil {
		return err
	}
	group := cfg.Heads / cfg.KVHeads // query heads per kv head
	if cfg.KVHeads >= ranks {
		// Units of u kv-head groups, the fewest whose columns fill whole
		// blocks of attn_output.
		u := 1
		for (u*group*cfg.HeadDim)%oBlock != 0 {
			u++
		}
		if cfg.KVHeads%u != 0 || cfg.KVHeads/u < ranks {
			return fmt.Errorf("%w: %d kv heads (of %d queries of %d) in units of %d that fill %d-value blocks of attn_output: fewer than %d ranks",
				ErrTPSplit, cfg.KVHeads, group, cfg.HeadDim, u, oBlock, ranks)
		}
		at := 0
		for r, n := range spread(cfg.KVHeads/u, ranks) {
			out[r].KVHead, out[r].KVHeads = at*u, n*u
			out[r].Head, out[r].Heads = at*u*group, n*u*group
			at += n
		}
		return nil
	}
	share := ranks / cfg.KVHeads // ranks per kv head
	if ranks%cfg.KVHeads != 0 || group%share != 0 {
		return fmt.Errorf("%w: %d kv heads of %d queries each on %d ranks: with fewer kv heads than ranks, the ranks must be a multiple of the kv heads and split each one's queries evenly",
			ErrTPSplit, cfg.KVHeads, group, ranks)
	}
	h := group / share
	if (h*cfg.HeadDim)%oBlock != 0 {
		return fmt.Errorf("%w: %d heads of %d per rank do not fill %d-value blocks of attn_output", ErrTPSplit, h, cfg.HeadDim, oBlock)
	}
	for r := range out {
		kv := r / share
		out[r].KVHead, out[r].KVHeads = kv, 1
		out[r].Head, out[r].Heads = kv*group+(r%share)*h, h
	}
	return nil
}

// splitLatentHeads splits deepseek2's latent attention by heads: each rank
// its heads' rows of attn_q_b (or attn_q), their matrices of attn_k_b and
// attn_v_b, and their columns of attn_output, in units of heads whose
// values fill whole blocks of attn_output. Replicated: the compressions
// (attn_q_a, attn_kv_a_mqa, and their norms) and the cache, which holds
// the one latent every head attends to (the single kv head).
func splitLatentHeads(f *gguf.File, cfg Config, out []TPSlice) error {
	ranks := len(out)
	oBlock, err := blockOf(f, cfg, "attn_output.weight")
	if err != nil {
		return err
	}
	u := 1
	for (u*cfg.ValueDimMLA)%oBlock != 0 {
		u++
	}
	if cfg.Heads%u != 0 || cfg.Heads/u < ranks {
		return fmt.Errorf("%w: %d latent-attention heads (values of %d) in units of %d that fill %d-value blocks of attn_output: fewer than %d ranks",
			ErrTPSplit, cfg.Heads, cfg.ValueDimMLA, u, oBlock, ranks)
	}
	at := 0
	for r, n := range spread(cfg.Heads/u, ranks) {
		out[r].KVHead, out[r].KVHeads = 0, 1
		out[r].Head, out[r].Heads = at*u, n*u
		at += n
	}
	return nil
}

// splitColumns splits an MLP of ff hidden columns (down, its down
// projection, cut by columns) over out in whole blocks of down, evenly,
// and gives set each rank's range.
func splitColumns(f *gguf.File, cfg Config, down string, ff int, out []TPSlice, set func(s *TPSlice, at, n int)) error {
	b, err := blockOf(f, cfg, down)
	if err != nil {
		return err
	}
	if ff%b != 0 || ff/b < len(out) {
		return fmt.Errorf("%w: an MLP of %d columns in %d-value blocks of %s does not split over %d ranks", ErrTPSplit, ff, b, down, len(out))
	}
	at := 0
	for r, n := range spread(ff/b, len(out)) {
		set(&out[r], at*b, n*b)
		at += n
	}
	return nil
}

// vocabUnit is the rows of the output head a vocabulary split deals in:
// whole tiles of the repacked layouts.
const vocabUnit = 64

// splitVocab gives each rank a range of the output head's rows, evenly in
// units of vocabUnit, the remainder on the last rank; a vocabulary too
// small for a unit per rank is not split (the head whole on rank 0).
// The head runs after the last block, with every other rank waiting:
// split, each computes its part (BenchmarkHead: the 1b preset's whole
// head 2.6 ms, half 1.2 ms) and the parts are gathered (docs/inference.md).
func splitVocab(vocab int, out []TPSlice) {
	if vocab/vocabUnit < len(out) {
		return
	}
	at := 0
	for r, n := range spread(vocab/vocabUnit, len(out)) {
		out[r].VocabFirst, out[r].VocabRows = at*vocabUnit, n*vocabUnit
		at += n
	}
	out[len(out)-1].VocabRows += vocab % vocabUnit
}

// splitExperts fills out's expert ranges: every expert's columns, evenly,
// where the experts' hidden size divides into the ranks' blocks of down
// (ffn_down_exps), else whole experts (see ExpertSplit).
func splitExperts(f *gguf.File, cfg Config, out []TPSlice, split ExpertSplit) error {
	ranks := len(out)
	eBlock, err := blockOf(f, cfg, "ffn_down_exps.weight")
	if err != nil {
		return err
	}
	even := cfg.ExpertFFDim%eBlock == 0 && (cfg.ExpertFFDim/eBlock)%ranks == 0
	switch {
	case split == ExpertsColumns && !even:
		return fmt.Errorf("%w: experts of %d columns in %d-value blocks of ffn_down_exps do not split evenly over %d ranks", ErrTPSplit, cfg.ExpertFFDim, eBlock, ranks)
	case split == ExpertsColumns || split == ExpertsAuto && even:
		at := 0
		for r, n := range spread(cfg.ExpertFFDim/eBlock, ranks) {
			s := &out[r]
			s.Expert, s.Experts, s.FullExperts, s.ExpertColumns = 0, cfg.Experts, cfg.Experts, true
			s.FF, s.FFDim, s.FullFF = at*eBlock, n*eBlock, cfg.ExpertFFDim
			at += n
		}
		return nil
	}
	at := 0
	for r, n := range spread(cfg.Experts, ranks) {
		s := &out[r]
		s.Expert, s.Experts, s.FullExperts = at, n, cfg.Experts
		s.FF, s.FFDim = 0, cfg.FFDim
		at += n
	}
	return nil
}

// PlanTPFile is PlanTP of the model file at path.
func PlanTPFile(path string, ranks int) ([]TPSlice, error) {
	f, err := gguf.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return PlanTP(f, cfg, ranks)
}

// spread splits n units over k parts, the first n%k one larger.
func spread(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

// blockOf is the values per quantization block of the tensor named
// suffix in the first of cfg's blocks that has one (deepseek2's dense and
// expert blocks hold different tensors).
func blockOf(f *gguf.File, cfg Config, suffix string) (int, error) {
	first, last := cfg.Blocks()
	for i := first; i < last; i++ {
		t, ok := f.Tensor(fmt.Sprintf("blk.%d.%s", i, suffix))
		if !ok {
			continue
		}
		for n := uint64(1); n <= 256; n *= 2 {
			if _, ok := t.Type.RowBytes(n); ok {
				return int(n), nil
			}
		}
		return 0, fmt.Errorf("%w: %s has type %s, whose blocks Orrery does not know", ErrTPSplit, t.Name, t.Type)
	}
	return 0, fmt.Errorf("%w: no block has %s", ErrTPSplit, suffix)
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
