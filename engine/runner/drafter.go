package runner

import (
	"context"
	"slices"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Draft sources. A speculating request drafts through a Drafter, which its
// slot holds while the request runs: the scheduler makes it when the
// request starts, from the source its Speculation.Draft names
// (Speculator.sources, built with the scheduler: prompt lookup always, the
// draft model under its ID when the instance loaded one). Every source's
// drafts are verified alike (spec.go), and adaptive K (speccost.go) weighs
// them with what it has measured of the source: its drafts' acceptance
// across requests and, where a draft costs a call of a model, that call's
// time by its passes. The Drafter interface and a slot's state are
// declared in speccost.go, beside adaptive K, which reads them.
//
// Adding a third source (a model's own MTP head, say):
//  1. a type whose Draft proposes up to k tokens to follow a slot's
//     history and reports the forward passes it ran (0 where it runs
//     none: adaptive K then charges its drafts only their rows);
//  2. a name requests give it in "speculative": {"draft": NAME}, which
//     runnerapi.Speculation.DraftsWith must accept (canSpeculate and the
//     agent's placement check requests with it, and clients read its
//     error texts);
//  3. an entry in NewSpeculator's sources: a draftSource whose drafter
//     makes the type for a slot and request, with call set to &line{}
//     where its drafts cost passes (so that K waits until D(k) is timed);
//  4. any state it keeps of its own drafts dropped where the next call's
//     history disagrees with them: a Drafter is not told which were
//     rejected (the draft model compares the history it is given with
//     what it fed its cache).

var (
	_ Drafter = promptLookup{}
	_ Drafter = modelDrafter{}
)

// Speculator is a scheduler's speculative decoding: the draft sources its
// requests may name, and what adaptive K has measured of them and of the
// target's steps (speccost.go). Run's goroutine alone uses it, but for
// sources and draftID, which NewSpeculator sets and canSpeculate reads
// from request handlers too.
type Speculator struct {
	// sources are by the name a request gives (Speculation.Draft).
	sources map[string]*draftSource
	// draftID is the draft model's ID ("": none), which DraftsWith's
	// errors name.
	draftID string
	// cost is what the target's steps took by their rows.
	cost specCost
	// lastRows and lastGroups are the rows and groups (slots) of the last
	// step returned: a speculating slot weighs its drafts against the
	// other rows of a step.
	lastRows, lastGroups int
}

// NewSpeculator drafts by prompt lookup and, with a draft model m (nil:
// none), with m under its ID.
func NewSpeculator(m *DraftModel) *Speculator {
	p := &Speculator{sources: map[string]*draftSource{}}
	if m != nil {
		p.draftID = m.ID
		p.sources[m.ID] = &draftSource{call: &line{}, drafter: func(slot int, sp *runnerapi.Speculation) Drafter {
			pMin := runnerapi.DefaultPMin
			if sp.PMin != nil {
				pMin = *sp.PMin
			}
			return modelDrafter{m: m, slot: slot, pMin: pMin}
		}}
	}
	// Set last: a draft model with this ID does not take the name from
	// prompt lookup (DraftsWith reads it as lookup's too).
	p.sources[runnerapi.DraftNgram] = &draftSource{drafter: func(int, *runnerapi.Speculation) Drafter { return promptLookup{} }}
	return p
}

// stepped records a step of rows in groups that took d from submission to
// its samples.
func (p *Speculator) stepped(rows, groups int, d time.Duration) {
	p.cost.step(rows, d)
	p.lastRows, p.lastGroups = rows, groups
}

// Prompt lookup: a slot drafts what followed the latest earlier
// occurrence of its last few tokens in its own history (prompt and
// output).
const (
	// ngramMax is the longest suffix looked up; shorter ones are tried
	// when it is not found. ngramWindow bounds the history searched.
	ngramMax    = 3
	ngramWindow = 4096
)

// promptLookup drafts by ngramDraft. It costs no pass and keeps no state.
type promptLookup struct{}

func (promptLookup) Draft(_ context.Context, hist []int32, k int) ([]int32, int, error) {
	return ngramDraft(hist, k), 0, nil
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
