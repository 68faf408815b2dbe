package runner

import (
	"slices"
	"strings"
	"testing"
)

// Prompt lookup drafts what followed the latest earlier occurrence of the
// longest matching suffix (3 tokens down to 1), at most k tokens.
func TestNgramDraft(t *testing.T) {
	for _, tc := range []struct {
		hist []int32
		k    int
		want []int32
	}{
		{[]int32{1, 2, 3, 4, 5, 1, 2, 3}, 2, []int32{4, 5}},
		{[]int32{1, 2, 3, 4, 5, 1, 2, 3}, 9, []int32{4, 5, 1, 2, 3}},
		// The latest occurrence wins: after "7 8", 9 then (later) 6.
		{[]int32{7, 8, 9, 0, 7, 8, 6, 0, 7, 8}, 1, []int32{6}},
		// No 3- or 2-gram repeats; the 1-gram 5 does.
		{[]int32{5, 1, 2, 9, 5}, 3, []int32{1, 2, 9}},
		{[]int32{1, 2, 3}, 4, nil},
		{[]int32{1, 1}, 4, []int32{1}},
		{[]int32{1, 2, 1, 2}, 0, nil},
		{nil, 3, nil},
	} {
		if got := ngramDraft(tc.hist, tc.k); !slices.Equal(got, tc.want) {
			t.Errorf("ngramDraft(%v, %d) = %v, want %v", tc.hist, tc.k, got, tc.want)
		}
	}
}

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

func TestDraftThreads(t *testing.T) {
	for _, c := range []struct {
		set, target int
		weights     uint64
		want        int
	}{
		{0, 8, 3 << 20, 1},              // the KJV draft: one thread
		{0, 8, SmallDraftBytes, 1},      // at the limit
		{0, 8, SmallDraftBytes + 1, 8},  // larger: the target's
		{3, 8, 3 << 20, 3},              // asked for
		{2, 8, SmallDraftBytes << 4, 2}, // asked for
		{0, 1, SmallDraftBytes << 4, 1}, // a 1-thread target
	} {
		if got := draftThreads(c.set, c.target, c.weights); got != c.want {
			t.Errorf("draftThreads(%d, %d, %d) = %d, want %d", c.set, c.target, c.weights, got, c.want)
		}
	}
}

func TestSpeculationDefault(t *testing.T) {
	def := &Speculation{Draft: "d", Max: 4}
	if got := (*Speculation)(nil).orDefault(def); got == nil || *got != *def || got == def {
		t.Errorf("no speculation asked: %+v, want a copy of the default %+v", got, def)
	}
	if got := (&Speculation{Draft: SpeculationOff}).orDefault(def); got != nil {
		t.Errorf(`"none": %+v, want none`, got)
	}
	own := &Speculation{Draft: "ngram", Max: 2}
	if got := own.orDefault(def); got != own {
		t.Errorf("its own: %+v, want %+v", got, own)
	}
	if got := (*Speculation)(nil).orDefault(nil); got != nil {
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
