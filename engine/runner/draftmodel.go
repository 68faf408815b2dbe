package runner

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// A draft model: a small model with the target's vocabulary, loaded beside
// rank 0 (whose node samples or leads), that drafts a speculating slot's
// next tokens greedily, one forward pass each. Its cache keeps each slot's
// history: a step feeds what the draft has not seen yet (the tokens the
// target accepted since, and its pending token), then drafts; positions
// that the target rejected are dropped at the next step, by comparing
// histories. Greedy drafts propose one token with certainty, so the
// target's verification (sample.Sampler.Verify) keeps its distribution.

// DraftModel drafts for the scheduler, through each speculating slot's
// modelDrafter. Its methods run on the scheduler's goroutine.
type DraftModel struct {
	// ID is the name requests give in "speculative": {"draft": ID}.
	ID string
	F  backend.Rank
	// seen is each slot's tokens in the draft's cache.
	seen [][]int32
	// greedy picks each draft (temperature 0).
	greedy *sample.Sampler
}

// CheckVocab refuses a draft whose vocabulary is not the target's, naming
// the first difference.
func CheckVocab(target, draft *tokenizer.Tokenizer) error {
	if target.VocabSize() != draft.VocabSize() {
		return fmt.Errorf("the draft's vocabulary has %d tokens, the target's %d", draft.VocabSize(), target.VocabSize())
	}
	for id := range int32(target.VocabSize()) {
		a, erra := target.Decode([]int32{id})
		b, errb := draft.Decode([]int32{id})
		if a != b || (erra == nil) != (errb == nil) {
			return fmt.Errorf("token %d differs: the target's is %q, the draft's %q", id, a, b)
		}
	}
	return nil
}

// modelDrafter is a slot's Drafter with the draft model, for a request
// whose drafting stops at pMin (draft).
type modelDrafter struct {
	m    *DraftModel
	slot int
	pMin float64
}

func (d modelDrafter) Draft(ctx context.Context, hist []int32, k int) ([]int32, int, error) {
	out, err := d.m.draft(ctx, d.slot, hist, k, d.pMin)
	passes := len(out)
	if passes < k {
		passes++ // the pass whose token p_min stopped
	}
	return out, passes, err
}

// draft proposes up to k tokens to follow hist (the slot's cached tokens
// and its pending one).
// It stops early at a token the draft itself gives less than pMin (0:
// never), as llama.cpp's p_min: such a draft is likely rejected, and
// drafting and verifying it would cost more than it saves.
func (d *DraftModel) draft(ctx context.Context, slot int, hist []int32, k int, pMin float64) ([]int32, error) {
	if k <= 0 || len(hist) == 0 {
		return nil, nil
	}
	if d.seen == nil {
		d.seen, d.greedy = make([][]int32, d.F.Options().Parallel), sample.New(sample.Options{})
	}
	ctxLen := d.F.Options().ContextLen
	if len(hist)+k > ctxLen {
		return nil, nil // no room in the draft's context: no drafts this step
	}
	keep := min(commonPrefix(d.seen[slot], hist), len(hist)-1)
	if err := d.F.Remove(slot, keep); err != nil {
		if !errors.Is(err, backend.ErrCannotKeep) {
			return nil, fmt.Errorf("draft model, slot %d: %w", slot, err)
		}
		keep = 0
	}
	d.seen[slot] = d.seen[slot][:keep]
	if err := d.makeRoom(slot, len(hist)+k); err != nil {
		return nil, err
	}
	var out []int32
	next, p, err := d.feed(ctx, slot, hist[keep:], keep, pMin > 0)
	for err == nil && p >= pMin {
		out = append(out, next)
		if len(out) == k {
			break
		}
		next, p, err = d.feed(ctx, slot, []int32{next}, len(d.seen[slot]), pMin > 0)
	}
	if err != nil {
		d.seen[slot] = nil
		d.F.Remove(slot, 0)
		return nil, fmt.Errorf("draft model, slot %d: %w", slot, err)
	}
	return out, nil
}

// feed runs toks at positions from pos on in slot, in batches, and
// returns the argmax after the last and, if prob, its probability (else
// 1: a softmax over the vocabulary costs a tenth of a small draft's pass).
func (d *DraftModel) feed(ctx context.Context, slot int, toks []int32, pos int, prob bool) (int32, float64, error) {
	bs := d.F.Options().BatchSize
	var logits []float32
	for i := 0; i < len(toks); i += bs {
		chunk := toks[i:min(i+bs, len(toks))]
		b := backend.Batch{Tokens: chunk, Positions: positions(pos+i, pos+i+len(chunk)), Seqs: make([]int, len(chunk))}
		for j := range b.Seqs {
			b.Seqs[j] = slot
		}
		res, err := d.F.Forward(ctx, b)
		if err != nil {
			return 0, 0, err
		}
		logits = res.Logits
	}
	d.seen[slot] = append(d.seen[slot], toks...)
	tok, err := d.greedy.Next(logits) // the argmax, NaNs never picked, as the target's greedy sampler
	if err != nil {
		return 0, 0, err
	}
	if !prob {
		return tok, 1, nil
	}
	return tok, topProb(logits, tok), nil
}

// topProb is the softmax probability of logits' argmax tok.
func topProb(logits []float32, tok int32) float64 {
	top := float64(logits[tok])
	sum := 0.0
	for _, l := range logits {
		if !isBadLogit(l) {
			sum += math.Exp(float64(l) - top)
		}
	}
	return 1 / sum
}

// makeRoom forgets the other slots' draft caches when slot's need would
// overflow the draft's pool of positions (they are rebuilt when next
// used).
func (d *DraftModel) makeRoom(slot, need int) error {
	used := need
	for i, s := range d.seen {
		if i != slot {
			used += len(s)
		}
	}
	if used <= d.F.Options().ContextLen {
		return nil
	}
	for i := range d.seen {
		if i != slot && len(d.seen[i]) > 0 {
			if err := d.F.Remove(i, 0); err != nil {
				return fmt.Errorf("draft model, slot %d: %w", i, err)
			}
			d.seen[i] = nil
		}
	}
	return nil
}

// draftThreads is how many threads a draft model of weights bytes computes
// on: set, if it is; else one for a small draft; else the target's.
func draftThreads(set, target int, weights uint64) int {
	switch {
	case set > 0:
		return set
	case weights <= runnerapi.SmallDraftBytes:
		return 1
	}
	return target
}

// draftGPULayers is how many of the draft model's blocks go on the GPU
// when the target's go as target says: none when the target's may not,
// else as many as fit beside the target's (a count of the target's blocks
// says nothing of the draft's).
func draftGPULayers(target runnerapi.GPULayers) runnerapi.GPULayers {
	if target == 0 {
		return 0
	}
	return runnerapi.GPUAuto
}
