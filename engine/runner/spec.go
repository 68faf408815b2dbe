package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Speculative decoding. A decoding slot whose request asks for it drafts
// up to Max tokens through its Drafter (drafter.go: prompt lookup, or a
// draft model); one step then runs the slot's pending token and the
// drafts as rows of one batch, and the sampler verifies the drafts in
// order against those rows' logits (sample.Sampler.Verify: greedy, the
// longest prefix that matches the argmax; sampling, rejection sampling
// that keeps the distribution exactly). The accepted drafts and one token
// more come out of the step; the cache positions of the rejected drafts
// are rolled back.

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

// canSpeculate checks a request's speculation (nil: none) against what
// this scheduler has: an engine that can roll back, and the draft source
// it names, which it returns (nil for none). Request handlers call it too,
// before they submit: it reads only what NewSpeculator set.
func (s *Scheduler) canSpeculate(sp *runnerapi.Speculation) (*draftSource, error) {
	s.init()
	if sp == nil {
		return nil, nil
	}
	if _, ok := s.E.(rollbacker); !ok {
		return nil, fmt.Errorf("%w: this engine cannot roll back rejected drafts: no speculative decoding", runnerapi.ErrBadRequest)
	}
	if err := sp.DraftsWith(s.Spec.draftID); err != nil {
		return nil, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
	}
	src, ok := s.Spec.sources[sp.Draft]
	if !ok { // DraftsWith and NewSpeculator disagree
		return nil, fmt.Errorf("speculative draft %q: no such source in this runner", sp.Draft)
	}
	return src, nil
}

// draft is what a speculating slot drafts to follow its pending token:
// at most its request's max, the tokens it may still generate less one,
// the context's room and the batch's (budget, with the pending token).
func (s *Scheduler) draft(ctx context.Context, sl *slot, budget int) ([]int32, error) {
	ss := &sl.spec
	if ss.d == nil {
		return nil, nil
	}
	sp := sl.job.req.Speculative
	span := sl.phase.Child("draft", "sample") // the drafting, in the step's trace
	defer span.End(trace.Args{}.WithToken(sl.n))
	c := &s.Spec.cost
	if !ss.chosen {
		// The other slots of the last step (it may hold this one's
		// prompt), a row each.
		c.firstK(ss, sp.Limit(), max(s.Spec.lastGroups-1, 0))
	}
	// A slot at k 0 had a row of the last step.
	probeK := func() int { return c.probeK(ss.src, sp.Limit(), max(s.Spec.lastRows-1, 0)) }
	k := min(max(ss.draftLen(sp.Limit(), probeK), sp.Min), sl.maxTok-sl.n-1, s.E.Options().ContextLen-len(sl.hist)-1, budget-1)
	hist := append(sl.hist[:len(sl.hist):len(sl.hist)], sl.tok)
	t0 := time.Now()
	out, passes, err := ss.d.Draft(ctx, hist, k)
	ss.src.called(passes, time.Since(t0))
	return out, err
}

// settleDrafts counts a drafting step's drafts and rolls back the cache
// positions of the rejected ones.
func (s *Scheduler) settleDrafts(sl *slot, smp Sampled) error {
	accepted := len(smp.Tokens) - 1
	sl.job.res.DraftTokens += smp.Drafted
	sl.job.res.AcceptedDraftTokens += accepted
	others := max(s.Spec.lastRows-1-smp.Drafted, 0) // the step's rows besides this slot's
	s.Spec.cost.nextK(&sl.spec, smp.Drafted, accepted, sl.job.req.Speculative.Limit(), others)
	rejected := smp.Drafted - accepted
	if rejected <= 0 {
		return nil
	}
	sl.hist = sl.hist[:len(sl.hist)-rejected]
	return s.E.(rollbacker).Rollback(sl.id, len(sl.hist))
}
