package runner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
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

func TestDraftThreads(t *testing.T) {
	for _, c := range []struct {
		set, target int
		weights     uint64
		want        int
	}{
		{0, 8, 3 << 20, 1},                        // the KJV draft: one thread
		{0, 8, runnerapi.SmallDraftBytes, 1},      // at the limit
		{0, 8, runnerapi.SmallDraftBytes + 1, 8},  // larger: the target's
		{3, 8, 3 << 20, 3},                        // asked for
		{2, 8, runnerapi.SmallDraftBytes << 4, 2}, // asked for
		{0, 1, runnerapi.SmallDraftBytes << 4, 1}, // a 1-thread target
	} {
		if got := draftThreads(c.set, c.target, c.weights); got != c.want {
			t.Errorf("draftThreads(%d, %d, %d) = %d, want %d", c.set, c.target, c.weights, got, c.want)
		}
	}
}

// oracle is a Drafter for the script s: it drafts the tokens s will
// choose after hist, or, when wrong, the vocabulary's last token (which s
// never chooses). It records the histories it was given.
type oracle struct {
	s     *script
	wrong bool
	hists *[][]int32
}

func (o oracle) Draft(_ context.Context, hist []int32, k int) ([]int32, int, error) {
	*o.hists = append(*o.hists, slices.Clone(hist))
	var out []int32
	for i := len(hist) - o.s.prompt; len(out) < k && i >= 0 && i < len(o.s.next); i++ {
		tok := o.s.next[i]
		if o.wrong {
			tok = int32(o.s.vocab - 1)
		}
		out = append(out, tok)
	}
	return out, len(out), nil
}

// The scheduler drafts through the source a request names, one drafter a
// request made for its slot and dropped when it ends; a source is a map
// entry. Its drafts are verified: a right one is accepted, a wrong one
// rejected and its cache positions rolled back; the answer is the same
// token for token, with a logprob each.
func TestSchedulerDrafters(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello world", true)
	words := ids(t, tok, "the cluster is the model of the world")
	s := &script{vocab: tok.VocabSize(), ctxLen: 256, batch: 64, parallel: 2, prompt: len(prompt), next: append(words, 4)}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	spec := NewSpeculator(nil)
	var made []int
	var hists [][]int32
	for name, wrong := range map[string]bool{"right": false, "wrong": true} {
		spec.sources[name] = &draftSource{call: &line{}, drafter: func(slot int, sp *runnerapi.Speculation) Drafter {
			made = append(made, slot)
			return oracle{s: s, wrong: wrong, hists: &hists}
		}}
	}
	sc := startSched(t, &Scheduler{E: g.M, Tok: tok, Spec: spec})
	ask := func(draft string) ([]runnerapi.Piece, runnerapi.Result) {
		t.Helper()
		req := runnerapi.Request{Prompt: "hello world", MaxTokens: 40, Logprobs: true}
		if draft != "" {
			req.Speculative = &runnerapi.Speculation{Draft: draft, Max: 3, Min: 3}
		}
		var pieces []runnerapi.Piece
		res, err := submit(t, g, sc, context.Background(), req).Wait(func(p runnerapi.Piece) error { pieces = append(pieces, p); return nil })
		if err != nil {
			t.Fatalf("draft %q: %v", draft, err)
		}
		return pieces, res
	}
	tokens := func(ps []runnerapi.Piece) []int32 {
		var out []int32
		for _, p := range ps {
			if p.Token >= 0 {
				out = append(out, p.Token)
				if p.Logprobs == nil || p.Logprobs.Token != p.Token {
					t.Errorf("token %d at %d: logprobs %+v", p.Token, p.Index, p.Logprobs)
				}
			}
		}
		return out
	}
	plain, _ := ask("")
	if want := append(words, 4); !slices.Equal(tokens(plain), want) || len(made) != 0 {
		t.Fatalf("plain: %v, want %v; drafters made %v, want none", tokens(plain), want, made)
	}
	// DraftsWith knows the draft model's ID alone: the test's sources
	// stand in for it in turn.
	spec.draftID = "right"
	right, res := ask("right")
	if !slices.Equal(tokens(right), tokens(plain)) || res.DraftTokens == 0 || res.AcceptedDraftTokens != res.DraftTokens {
		t.Errorf("right drafts: %v (%d drafted, %d accepted), want %v, every draft accepted", tokens(right), res.DraftTokens, res.AcceptedDraftTokens, tokens(plain))
	}
	if len(made) != 1 || len(hists) == 0 || !slices.Equal(hists[0][:len(prompt)], prompt) {
		t.Errorf("drafters made for slots %v, want one; first history %v, want the prompt %v first", made, hists[:min(len(hists), 1)], prompt)
	}
	removed := len(s.removed)
	spec.draftID = "wrong"
	wrong, res := ask("wrong")
	if !slices.Equal(tokens(wrong), tokens(plain)) || res.DraftTokens == 0 || res.AcceptedDraftTokens != 0 {
		t.Errorf("wrong drafts: %v (%d drafted, %d accepted), want %v, none accepted", tokens(wrong), res.DraftTokens, res.AcceptedDraftTokens, tokens(plain))
	}
	rolled := 0
	for _, r := range s.removed[removed:] {
		if r[1] > len(prompt) {
			rolled++
		}
	}
	if len(made) != 2 || rolled == 0 {
		t.Errorf("drafters made for slots %v, want two; %d rollbacks past the prompt, want some", made, rolled)
	}
	// Run has finished both requests (their Wait returned after end): no
	// slot holds a drafter.
	for _, sl := range sc.slots {
		if sl.spec.d != nil || sl.spec.src != nil {
			t.Errorf("slot %d holds a drafter with no request", sl.id)
		}
	}
}

// A request names prompt lookup or the instance's draft model; the errors
// name what the instance drafts with, in DraftsWith's words.
func TestSpeculatorSources(t *testing.T) {
	half := 0.5
	for _, c := range []struct {
		model   *DraftModel
		sp      runnerapi.Speculation
		want    Drafter
		wantErr string
	}{
		{nil, runnerapi.Speculation{Draft: runnerapi.DraftNgram}, promptLookup{}, ""},
		{nil, runnerapi.Speculation{Draft: "d"}, nil, `speculative draft "d": the instance drafts with "ngram" only (no draft model)`},
		{&DraftModel{ID: "m"}, runnerapi.Speculation{Draft: "d"}, nil, `speculative draft "d": the instance drafts with "ngram" or its draft model "m"`},
		{&DraftModel{ID: "m"}, runnerapi.Speculation{Draft: runnerapi.DraftNgram}, promptLookup{}, ""},
		{&DraftModel{ID: "m"}, runnerapi.Speculation{Draft: "m"}, modelDrafter{slot: 1, pMin: runnerapi.DefaultPMin}, ""},
		{&DraftModel{ID: "m"}, runnerapi.Speculation{Draft: "m", PMin: &half}, modelDrafter{slot: 1, pMin: 0.5}, ""},
		// A draft model named as prompt lookup leaves the name to lookup.
		{&DraftModel{ID: runnerapi.DraftNgram}, runnerapi.Speculation{Draft: runnerapi.DraftNgram}, promptLookup{}, ""},
	} {
		sc := &Scheduler{E: &Local{F: &script{vocab: 8, ctxLen: 16, batch: 4}}, Spec: NewSpeculator(c.model)}
		src, err := sc.canSpeculate(&c.sp)
		if c.wantErr != "" {
			if err == nil || !errors.Is(err, runnerapi.ErrBadRequest) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%+v with %+v: %v, want %q", c.sp, c.model, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v with %+v: %v", c.sp, c.model, err)
			continue
		}
		d := src.drafter(1, &c.sp)
		if md, ok := d.(modelDrafter); ok {
			if md.m != c.model {
				t.Errorf("%+v: drafts with %p, want the instance's %p", c.sp, md.m, c.model)
			}
			md.m = nil
			d = md
		}
		if d != c.want || (src.call != nil) != (c.want != promptLookup{}) {
			t.Errorf("%+v with %+v: drafter %#v (its calls timed: %v), want %#v", c.sp, c.model, d, src.call != nil, c.want)
		}
	}
	if src, err := (&Scheduler{E: &Local{F: &script{vocab: 8, ctxLen: 16, batch: 4}}}).canSpeculate(nil); src != nil || err != nil {
		t.Errorf("no speculation: %v %v, want none", src, err)
	}
}
