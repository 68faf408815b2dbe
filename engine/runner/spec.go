package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
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

// Speculation asks for speculative decoding of a request.
type Speculation struct {
	// Draft is the draft source: "ngram" (prompt lookup), or the id of
	// the instance's draft model (draftmodel.go).
	Draft string `json:"draft"`
	// Max is the most tokens drafted per step (0: DefaultDraft).
	Max int `json:"max,omitempty"`
	// Min is the fewest drafted per step (llama.cpp's n_min; 0: as few
	// as the costs call for, none when drafting does not pay).
	Min int `json:"min,omitempty"`
	// PMin stops a draft model's drafting at a token it gives less than
	// this probability (nil: DefaultPMin; 0: never; prompt lookup ignores
	// it).
	PMin *float64 `json:"p_min,omitempty"`
}

// Draft limits.
const (
	DefaultDraft = 5
	MaxDraft     = 16
	// DefaultPMin is 0 (draft every token): on the trained KJV pair,
	// llama.cpp's server default of 0.75 stopped most drafts at their
	// first token and decoded at 0.7× plain (make spec-bench, 2026-12-06).
	DefaultPMin = 0.0
	// ngramMax is the longest suffix looked up; shorter ones are tried
	// when it is not found. ngramWindow bounds the history searched.
	ngramMax    = 3
	ngramWindow = 4096
)

// SpeculationOff, as a request's draft ("speculative": {"draft":
// "none"}), turns its instance's default speculation off for it.
const SpeculationOff = "none"

// validate checks a speculation request against the rest of req.
func (sp *Speculation) validate(req *Request) error {
	if sp.Draft == SpeculationOff {
		return nil
	}
	if err := sp.check(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return nil
}

func (sp *Speculation) check() error {
	switch {
	case sp.Draft == "":
		return errors.New(`speculative draft is missing: "ngram" (prompt lookup) or the instance's draft model`)
	case sp.Max < 0 || sp.Max > MaxDraft:
		return fmt.Errorf("speculative max %d: want 1..%d", sp.Max, MaxDraft)
	case sp.Min < 0 || sp.Min > sp.max():
		return fmt.Errorf("speculative min %d: want 0..%d (the max)", sp.Min, sp.max())
	case sp.PMin != nil && !(*sp.PMin >= 0 && *sp.PMin <= 1):
		return fmt.Errorf("speculative p_min %v: want 0..1", *sp.PMin)
	}
	return nil
}

// CheckDefault checks sp as an instance's default speculation, which
// drafts with draftID (its draft model's id; "": none) or by prompt lookup.
func (sp *Speculation) CheckDefault(draftID string) error {
	if err := sp.check(); err != nil {
		return err
	}
	return sp.draftsWith(draftID)
}

// draftsWith checks sp's draft source against what an instance drafts
// with: prompt lookup, or its draft model draftID ("": none).
func (sp *Speculation) draftsWith(draftID string) error {
	if sp.Draft == "ngram" || draftID != "" && sp.Draft == draftID {
		return nil
	}
	have := `"ngram" only (no draft model)`
	if draftID != "" {
		have = fmt.Sprintf(`"ngram" or its draft model %q`, draftID)
	}
	return fmt.Errorf("speculative draft %q: the instance drafts with %s", sp.Draft, have)
}

// SameSpeculation reports whether two default speculations are the same
// (nil: none; p_min unset is not p_min 0, since the default may move).
func SameSpeculation(a, b *Speculation) bool {
	if a == nil || b == nil {
		return a == b
	}
	pa, pb := -1.0, -1.0
	if a.PMin != nil {
		pa = *a.PMin
	}
	if b.PMin != nil {
		pb = *b.PMin
	}
	return a.Draft == b.Draft && a.Max == b.Max && a.Min == b.Min && pa == pb
}

// orDefault is what a request speculates with: its own speculation, none
// when it says SpeculationOff, else def (the instance's default; nil:
// none), copied.
func (sp *Speculation) orDefault(def *Speculation) *Speculation {
	switch {
	case sp != nil && sp.Draft == SpeculationOff:
		return nil
	case sp != nil:
		return sp
	case def != nil:
		c := *def
		return &c
	}
	return nil
}

func (sp *Speculation) max() int {
	if sp.Max == 0 {
		return DefaultDraft
	}
	return sp.Max
}

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
func verifyGroup(g Group, rows []float32, vocab int, ss slotSampler) ([]int32, []*Logprobs, error) {
	var toks []int32
	var lps []*Logprobs
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
func (s *Scheduler) canSpeculate(sp *Speculation) error {
	if sp == nil {
		return nil
	}
	if _, ok := s.E.(rollbacker); !ok {
		return fmt.Errorf("%w: this engine cannot roll back rejected drafts: no speculative decoding", ErrBadRequest)
	}
	draftID := ""
	if s.Draft != nil {
		draftID = s.Draft.ID
	}
	if err := sp.draftsWith(draftID); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
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
		s.cost.firstK(sl, sp.max(), model, max(s.lastGroups-1, 0))
	}
	// A slot at k 0 had a row of the last step.
	probeK := func() int { return s.cost.probeK(sp.max(), model, max(s.lastRows-1, 0)) }
	k := min(max(sl.draftLen(sp.max(), probeK), sp.Min), sl.maxTok-sl.n-1, s.E.Options().ContextLen-len(sl.hist)-1, budget-1)
	hist := append(sl.hist[:len(sl.hist):len(sl.hist)], sl.tok)
	if !model {
		return ngramDraft(hist, k), nil
	}
	pMin := DefaultPMin
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
	s.cost.nextK(sl, smp.Drafted, accepted, sp.max(), sp.Draft != "ngram", others)
	rejected := smp.Drafted - accepted
	if rejected <= 0 {
		return nil
	}
	sl.hist = sl.hist[:len(sl.hist)-rejected]
	return s.E.(rollbacker).Rollback(sl.id, len(sl.hist))
}
