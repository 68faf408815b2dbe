package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Speculative decoding by prompt lookup. A decoding slot that asks for it
// drafts up to Max tokens by finding the latest earlier occurrence of its
// last few tokens in its own history (prompt and output) and proposing
// what followed; one step then runs the slot's pending token and the
// drafts as rows of one batch, and the sampler verifies the drafts in
// order against those rows' logits (sample.Sampler.Verify: greedy, the
// longest prefix that matches the argmax; sampling, rejection sampling
// that keeps the distribution exactly). The accepted drafts and one token
// more come out of the step; the cache positions of the rejected drafts
// are rolled back.

// Draft limits.
const (
	// ngramMax is the longest suffix looked up; shorter ones are tried
	// when it is not found. ngramWindow bounds the history searched.
	ngramMax    = 3
	ngramWindow = 4096
)

// ngramDraft proposes up to k tokens to follow hist: what followed the
// latest earlier occurrence of hist's last n tokens (n = ngramMax down to
// 1), within the last ngramWindow tokens.
func ngramDraft(hist []int32, k int) []int32 {
	if k <= 0 {
		return nil
	}
	if len(hist) > ngramWindow {
		hist = hist[len(hist)-ngramWindow:]
	}
	for n := min(ngramMax, len(hist)-1); n >= 1; n-- {
		tail := hist[len(hist)-n:]
		for i := len(hist) - n - 1; i >= 0; i-- {
			if slices.Equal(hist[i:i+n], tail) {
				return slices.Clone(hist[i+n : min(i+n+k, len(hist))])
			}
		}
	}
	return nil
}

// rollbacker is an Engine that can drop a slot's positions from keep on,
// on every rank (Local, Pipeline). Speculation runs only there.
type rollbacker interface {
	Rollback(slot, keep int) error
}

// Rollback drops slot's cached positions from keep on (rejected drafts).
func (l *Local) Rollback(slot, keep int) error {
	err := l.F.Remove(slot, keep)
	if errors.Is(err, backend.ErrCannotKeep) {
		return fmt.Errorf("roll back slot %d to %d positions: the sliding-window cache cannot", slot, keep)
	}
	return err
}

// verifyGroup runs a drafting group's verification over its rows' logits
// (rows: one per token of the group, vocab each): the accepted drafts,
// then the token the target chose after them; with each its logprobs
// (from the row it was decided on) when the request asked for them.
func verifyGroup(g Group, rows []float32, vocab int, ss slotSampler) ([]int32, []*runnerapi.Logprobs, error) {
	var toks []int32
	var lps []*runnerapi.Logprobs
	for i := range g.Draft + 1 {
		row := rows[i*vocab : (i+1)*vocab]
		var tok int32
		var ok bool
		var err error
		if i == g.Draft {
			tok, err = ss.smp.Next(row)
		} else {
			tok, ok, err = ss.smp.Verify(row, g.Tokens[i+1])
		}
		if err != nil {
			return nil, nil, err
		}
		toks = append(toks, tok)
		if ss.nlp >= 0 {
			lps = append(lps, logprobsOf(row, tok, ss.nlp))
		}
		if !ok {
			break
		}
	}
	return toks, lps, nil
}

// canSpeculate checks a request's speculation (nil: none) against what
// this scheduler has: an engine that can roll back, and the draft model
// it names.
func (s *Scheduler) canSpeculate(sp *runnerapi.Speculation) error {
	if sp == nil {
		return nil
	}
	if _, ok := s.E.(rollbacker); !ok {
		return fmt.Errorf("%w: this engine cannot roll back rejected drafts: no speculative decoding", runnerapi.ErrBadRequest)
	}
	draftID := ""
	if s.Draft != nil {
		draftID = s.Draft.ID
	}
	if err := sp.DraftsWith(draftID); err != nil {
		return fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
	}
	return nil
}

// draft is what a speculating slot drafts to follow its pending token:
// at most its request's max, the tokens it may still generate less one,
// the context's room and the batch's (budget, with the pending token).
func (s *Scheduler) draft(ctx context.Context, sl *slot, budget int) ([]int32, error) {
	sp := sl.job.req.Speculative
	if sp == nil {
		return nil, nil
	}
	span := sl.phase.Child("draft", "sample") // the lookup, in the step's trace
	defer span.End(trace.Args{}.WithToken(sl.n))
	model := sp.Draft != "ngram"
	if !sl.kChosen {
		// The other slots of the last step (it may hold this one's
		// prompt), a row each.
		s.cost.firstK(sl, sp.Limit(), model, max(s.lastGroups-1, 0))
	}
	// A slot at k 0 had a row of the last step.
	probeK := func() int { return s.cost.probeK(sp.Limit(), model, max(s.lastRows-1, 0)) }
	k := min(max(sl.draftLen(sp.Limit(), probeK), sp.Min), sl.maxTok-sl.n-1, s.E.Options().ContextLen-len(sl.hist)-1, budget-1)
	hist := append(sl.hist[:len(sl.hist):len(sl.hist)], sl.tok)
	if !model {
		return ngramDraft(hist, k), nil
	}
	pMin := runnerapi.DefaultPMin
	if sp.PMin != nil {
		pMin = *sp.PMin
	}
	t0 := time.Now()
	out, err := s.Draft.draft(ctx, sl.id, hist, k, pMin)
	passes := len(out)
	if passes < k {
		passes++ // the pass whose token p_min stopped
	}
	s.cost.draft(passes, time.Since(t0))
	return out, err
}

// settleDrafts counts a drafting step's drafts and rolls back the cache
// positions of the rejected ones.
func (s *Scheduler) settleDrafts(sl *slot, smp Sampled) error {
	accepted := len(smp.Tokens) - 1
	sl.job.res.DraftTokens += smp.Drafted
	sl.job.res.AcceptedDraftTokens += accepted
	sp := sl.job.req.Speculative
	others := max(s.lastRows-1-smp.Drafted, 0) // the step's rows besides this slot's
	s.cost.nextK(sl, smp.Drafted, accepted, sp.Limit(), sp.Draft != "ngram", others)
	rejected := smp.Drafted - accepted
	if rejected <= 0 {
		return nil
	}
	sl.hist = sl.hist[:len(sl.hist)-rejected]
	return s.E.(rollbacker).Rollback(sl.id, len(sl.hist))
}
