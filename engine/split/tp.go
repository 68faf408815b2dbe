package split

import (
	"errors"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

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
func PlanTP(f *gguf.File, cfg model.Config, ranks int) ([]model.TPSlice, error) {
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
func PlanTPExperts(f *gguf.File, cfg model.Config, ranks int, split ExpertSplit) ([]model.TPSlice, error) {
	switch {
	case ranks < 2 || ranks > model.MaxTPRanks:
		return nil, fmt.Errorf("%w: %d ranks, want 2..%d", ErrTPSplit, ranks, model.MaxTPRanks)
	case cfg.TP != nil:
		return nil, fmt.Errorf("%w: the file is itself a tensor-parallel slice", ErrTPSplit)
	case cfg.Experts > 0 && cfg.Experts < ranks:
		return nil, fmt.Errorf("%w: %d experts cannot be split whole over %d ranks", ErrTPSplit, cfg.Experts, ranks)
	case split == ExpertsColumns && cfg.Experts > 0 && cfg.LeadDense > 0:
		return nil, fmt.Errorf("%w: %s's experts split whole only (the MLP columns a rank holds are those of its %d leading dense blocks)", ErrTPSplit, cfg.Arch, cfg.LeadDense)
	}
	out := make([]model.TPSlice, ranks)
	for r := range out {
		out[r] = model.TPSlice{Rank: r, Ranks: ranks, FullHeads: cfg.Heads, FullKVHeads: cfg.KVHeads, FullFF: cfg.FFDim}
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
			if err := splitColumns(f, cfg, "ffn_down_shexp.weight", sh, out, func(s *model.TPSlice, at, n int) {
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
	if err := splitColumns(f, cfg, "ffn_down.weight", cfg.FFDim, out, func(s *model.TPSlice, at, n int) { s.FF, s.FFDim = at, n }); err != nil {
		return nil, err
	}
	return out, nil
}

// splitHeads gives each rank a range of the attention's heads (see
// PlanTP).
func splitHeads(f *gguf.File, cfg model.Config, out []model.TPSlice) error {
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
func splitLatentHeads(f *gguf.File, cfg model.Config, out []model.TPSlice) error {
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
func splitColumns(f *gguf.File, cfg model.Config, down string, ff int, out []model.TPSlice, set func(s *model.TPSlice, at, n int)) error {
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
func splitVocab(vocab int, out []model.TPSlice) {
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
func splitExperts(f *gguf.File, cfg model.Config, out []model.TPSlice, split ExpertSplit) error {
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
func PlanTPFile(path string, ranks int) ([]model.TPSlice, error) {
	f, err := gguf.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := model.FromGGUF(f)
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
func blockOf(f *gguf.File, cfg model.Config, suffix string) (int, error) {
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
