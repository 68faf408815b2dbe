package runnerapi

import "fmt"

// Speculation asks for speculative decoding of a request.
type Speculation struct {
	// Draft is the draft source: DraftNgram (prompt lookup), or the id
	// of the instance's draft model (engine/runner's draftmodel.go).
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

const (
	DefaultDraft = 5
	MaxDraft     = 16
	// DefaultPMin is 0 (draft every token): on the trained KJV pair,
	// llama.cpp's server default of 0.75 stopped most drafts at their
	// first token and decoded at 0.7× plain (make spec-bench, 2026-12-06).
	DefaultPMin = 0.0
)

// DraftNgram, as a request's draft, drafts by prompt lookup: every
// instance can.
const DraftNgram = "ngram"

// SpeculationOff, as a request's draft ("speculative": {"draft":
// "none"}), turns its instance's default speculation off for it.
const SpeculationOff = "none"

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

// SmallDraftBytes is the most weights a draft model computes on one
// thread by default. A small draft's ops last microseconds: a second
// thread gains it nothing (the 3.3 MB KJV draft: 0.35–0.40 ms a token on
// either, BenchmarkDecodeThreads), and on one thread it was ahead in
// spec-bench's runs (2026-12-06).
const SmallDraftBytes = 64 << 20

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
		return fmt.Errorf("speculative draft is missing: %q (prompt lookup) or the instance's draft model", DraftNgram)
	case sp.Max < 0 || sp.Max > MaxDraft:
		return fmt.Errorf("speculative max %d: want 1..%d", sp.Max, MaxDraft)
	case sp.Min < 0 || sp.Min > sp.Limit():
		return fmt.Errorf("speculative min %d: want 0..%d (the max)", sp.Min, sp.Limit())
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
	return sp.DraftsWith(draftID)
}

// DraftsWith checks sp's draft source against what an instance drafts
// with: prompt lookup, or its draft model draftID ("": none).
func (sp *Speculation) DraftsWith(draftID string) error {
	if sp.Draft == DraftNgram || draftID != "" && sp.Draft == draftID {
		return nil
	}
	have := fmt.Sprintf("%q only (no draft model)", DraftNgram)
	if draftID != "" {
		have = fmt.Sprintf("%q or its draft model %q", DraftNgram, draftID)
	}
	return fmt.Errorf("speculative draft %q: the instance drafts with %s", sp.Draft, have)
}

// OrDefault is what a request speculates with: its own speculation, none
// when it says SpeculationOff, else def (the instance's default; nil:
// none), copied.
func (sp *Speculation) OrDefault(def *Speculation) *Speculation {
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

// Limit is the most tokens drafted per step: Max, or DefaultDraft.
func (sp *Speculation) Limit() int {
	if sp.Max == 0 {
		return DefaultDraft
	}
	return sp.Max
}
