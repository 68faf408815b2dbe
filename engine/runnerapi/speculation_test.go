package runnerapi

import (
	"strings"
	"testing"
)

// A speculation request is checked: the draft source and the range; it
// goes with logprobs and grammars.
func TestSpeculationValidate(t *testing.T) {
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{Prompt: "x", Speculative: &Speculation{Draft: "ngram"}}, ""},
		{Request{Prompt: "x", Speculative: &Speculation{Draft: "ngram", Max: 16}}, ""},
		{Request{Prompt: "x", Speculative: &Speculation{Draft: ""}}, "draft is missing"},
		{Request{Prompt: "x", Speculative: &Speculation{Draft: "model-x"}}, ""}, // the runner checks it has that draft
		{Request{Prompt: "x", Speculative: &Speculation{Draft: "ngram", Max: 17}}, "want 1..16"},
		{Request{Prompt: "x", Logprobs: true, TopLogprobs: 3, Speculative: &Speculation{Draft: "ngram"}}, ""},
	} {
		err := tc.req.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.req.Speculative, err, tc.want)
		}
	}
}

func TestSpeculationDefault(t *testing.T) {
	def := &Speculation{Draft: "d", Max: 4}
	if got := (*Speculation)(nil).OrDefault(def); got == nil || *got != *def || got == def {
		t.Errorf("no speculation asked: %+v, want a copy of the default %+v", got, def)
	}
	if got := (&Speculation{Draft: SpeculationOff}).OrDefault(def); got != nil {
		t.Errorf(`"none": %+v, want none`, got)
	}
	own := &Speculation{Draft: "ngram", Max: 2}
	if got := own.OrDefault(def); got != own {
		t.Errorf("its own: %+v, want %+v", got, own)
	}
	if got := (*Speculation)(nil).OrDefault(nil); got != nil {
		t.Errorf("no default: %+v", got)
	}
	if err := (&Speculation{Draft: SpeculationOff}).validate(&Request{}); err != nil {
		t.Errorf(`a request's "none": %v`, err)
	}
	half, bad := 0.5, 2.0
	for _, c := range []struct {
		sp    Speculation
		draft string
		err   string
	}{
		{Speculation{Draft: "ngram", Max: 8}, "", ""},
		{Speculation{Draft: "d", Max: 4, PMin: &half}, "d", ""},
		{Speculation{Draft: "d"}, "", `drafts with "ngram" only (no draft model)`},
		{Speculation{Draft: "e"}, "d", `drafts with "ngram" or its draft model "d"`},
		{Speculation{Draft: SpeculationOff}, "d", `draft "none"`},
		{Speculation{}, "d", "draft is missing"},
		{Speculation{Draft: "ngram", Max: 17}, "", "want 1..16"},
		{Speculation{Draft: "ngram", PMin: &bad}, "", "p_min 2: want 0..1"},
		{Speculation{Draft: "ngram", Min: 4, Max: 4}, "", ""},
		{Speculation{Draft: "ngram", Min: 6}, "", "min 6: want 0..5 (the max)"},
		{Speculation{Draft: "ngram", Min: -1, Max: 8}, "", "min -1: want 0..8"},
	} {
		err := c.sp.CheckDefault(c.draft)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("CheckDefault(%+v, %q) = %v, want %q", c.sp, c.draft, err, c.err)
		}
	}
}

// TestSameSpeculation: an instance is reused only for the same default
// speculation (p_min unset is not p_min 0: the runner's default may move).
func TestSameSpeculation(t *testing.T) {
	zero, half := 0.0, 0.5
	ng := func(max int, p *float64) *Speculation {
		return &Speculation{Draft: "ngram", Max: max, PMin: p}
	}
	for _, c := range []struct {
		a, b *Speculation
		want bool
	}{
		{nil, nil, true},
		{nil, ng(4, nil), false},
		{ng(4, nil), ng(4, nil), true},
		{ng(4, nil), ng(5, nil), false},
		{ng(4, &half), ng(4, &half), true},
		{ng(4, &zero), ng(4, &half), false},
		{ng(4, nil), ng(4, &zero), false},
		{ng(4, nil), &Speculation{Draft: "d", Max: 4}, false},
		{ng(4, nil), &Speculation{Draft: "ngram", Max: 4, Min: 4}, false},
	} {
		if got := SameSpeculation(c.a, c.b); got != c.want {
			t.Errorf("SameSpeculation(%+v, %+v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
