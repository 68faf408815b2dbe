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
// time by its passes.
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

// Drafter proposes drafts for one speculating request in one slot. Its
// methods run on the scheduler's goroutine, one call at a time, between
// steps.
type Drafter interface {
	// Draft proposes up to k tokens (k ≥ 0; fewer or none is fine) to
	// follow hist: the slot's cached tokens, then its pending one. hist
	// is the scheduler's, not to be kept. passes is how many forward
	// passes of a model the call ran (0 for a source that runs none),
	// which adaptive K times as the source's call.
	Draft(ctx context.Context, hist []int32, k int) (drafts []int32, passes int, err error)
}

var (
	_ Drafter = promptLookup{}
	_ Drafter = modelDrafter{}
)

// draftSource is a draft source requests may name: how a slot's drafter
// is made, and what adaptive K has measured of the source's drafts across
// requests. Run's goroutine alone uses it.
type draftSource struct {
	// drafter makes the drafter of a request speculating with sp in slot.
	drafter func(slot int, sp *runnerapi.Speculation) Drafter
	// call, for a source whose drafts cost a call of a model, is that
	// call's time in ns as a line in its passes (D(k)); nil where drafts
	// cost only the verifying step's rows (prompt lookup).
	call *line
	// accepted and rejections are every request's drafts from the source
	// and its rejections, decayed: a new request's α starts there.
	accepted, rejections float64
}

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

// called records a call of src that ran passes and took d.
func (src *draftSource) called(passes int, d time.Duration) {
	if passes > 0 && src.call != nil {
		src.call.add(float64(passes), float64(d.Nanoseconds()), costDecay)
	}
}

// callCost is a call of src of k passes in ns, ok once one was measured
// (0 and ok for a source without calls).
func (src *draftSource) callCost(k int) (float64, bool) {
	if src.call == nil {
		return 0, true
	}
	a, b, _, ok := src.call.fit()
	if k == 0 {
		return 0, ok
	}
	return a + b*float64(k), ok
}

// slotSpec is a slot's speculation: the drafter of its request while a
// speculating one runs, and adaptive K's state of the slot (speccost.go).
type slotSpec struct {
	// d drafts for the slot's request, from source src; both nil when the
	// request does not speculate, or none runs.
	d   Drafter
	src *draftSource
	// k is how many tokens to draft next, once chosen (firstK); idle
	// counts the steps since a probe while it is 0.
	k      int
	chosen bool
	idle   int
	// accepted and rejections are the slot's drafts and its rejections,
	// decayed.
	accepted, rejections float64
	// sinceMax counts the slot's steps since it last drafted its max.
	// It runs on across the slot's requests (reset keeps it): most end
	// before a max probe.
	sinceMax int
}

// reset starts the slot's speculation over for a request speculating
// with sp from src (nil, nil: none): a drafter of its own, and adaptive
// K's state afresh but for sinceMax.
func (ss *slotSpec) reset(slot int, sp *runnerapi.Speculation, src *draftSource) {
	*ss = slotSpec{sinceMax: ss.sinceMax}
	if src != nil {
		ss.d, ss.src = src.drafter(slot, sp), src
	}
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
