package ggmlintegration

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Greedy output with prompt-lookup speculation is token for token the
// output without it, for every family gen-model writes (the sliding-window
// ones roll back inside their window), and drafts get accepted: a random
// model's greedy output falls into loops that lookup predicts. "min" keeps
// drafts in every step: on these small models an extra row costs about as
// much as a pass, and adaptive K alone might draft nothing to roll back.
func TestSpeculationGreedyIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (every family, with and without speculation, on real ggml): runs in make test")
	}
	prompt := strings.Repeat("one two three four five six seven eight nine ten ", 4)
	drafted, accepted := 0, 0
	for _, fam := range model.Families {
		t.Run(fam, func(t *testing.T) {
			path := genFamily(t, fam, "F32")
			_, c := newServerOpts(t, path, backend.Options{Threads: 2, BatchSize: 64, KVType: "f32", Parallel: 2})
			req := runnerapi.Request{Prompt: prompt, MaxTokens: 48, IgnoreEOS: true}
			plain, _, _ := complete(t, c, runnerapi.CompletionRequest{Request: req})
			req.Speculative = &runnerapi.Speculation{Draft: "ngram", Max: 6, Min: 3}
			spec, _, done := complete(t, c, runnerapi.CompletionRequest{Request: req, TraceID: "spec-" + fam})
			names := map[string]int{}
			for _, sp := range done.Spans {
				names[sp.Name]++
			}
			if names["draft"] == 0 || names["verify"] == 0 {
				t.Errorf("the trace has %d draft and %d verify spans, want some of each", names["draft"], names["verify"])
			}
			t.Logf("%s: %d tokens; %d drafted, %d accepted", fam, len(spec), done.DraftTokens, done.AcceptedDraftTokens)
			if !slices.Equal(plain, spec) {
				t.Errorf("speculation changed the greedy output:\nplain %v\nspec  %v", plain, spec)
			}
			if done.AcceptedDraftTokens > done.DraftTokens || done.CompletionTokens != 48 {
				t.Errorf("%d of %d drafts accepted, %d tokens (want 48)", done.AcceptedDraftTokens, done.DraftTokens, done.CompletionTokens)
			}
			drafted += done.DraftTokens
			accepted += done.AcceptedDraftTokens
		})
	}
	t.Logf("all families: %d drafted, %d accepted", drafted, accepted)
	if drafted == 0 || accepted == 0 {
		t.Errorf("%d drafted, %d accepted: prompt lookup never drafted or never hit", drafted, accepted)
	}
}

// Through pipelines of 2 and 3 ranks (links over TCP) the last rank
// verifies the drafts and every rank rolls back the rejected ones: the
// greedy tokens of one rank without speculation, with drafts accepted.
func TestSpeculationPipeline(t *testing.T) {
	for _, fam := range []string{"llama", "qwen3moe", "gemma3"} {
		path := genFamily(t, fam, "F32")
		req := runnerapi.Request{Prompt: strings.Repeat("alpha beta gamma delta ", 5), MaxTokens: 32, IgnoreEOS: true}
		_, one := newServerOpts(t, path, backend.Options{Threads: 1, BatchSize: 16, KVType: "f32"})
		want, _, _ := complete(t, one, runnerapi.CompletionRequest{Request: req})
		req.Speculative = &runnerapi.Speculation{Draft: "ngram", Max: 4, Min: 2} // min: drafts to roll back, whatever the costs
		for _, ranges := range [][][2]int{{{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}} {
			p := startPipelineN(t, path, ranges, 2)
			got, done, err := p.complete(t, runnerapi.CompletionRequest{Request: req})
			if err != nil {
				t.Fatalf("%s, %d ranks: %v", fam, len(ranges), err)
			}
			t.Logf("%s, %d ranks: %d drafted, %d accepted", fam, len(ranges), done.DraftTokens, done.AcceptedDraftTokens)
			if !slices.Equal(got, want) {
				t.Errorf("%s, %d ranks: speculation changed the greedy output:\nwant %v\ngot  %v", fam, len(ranges), want, got)
			}
			if done.DraftTokens == 0 {
				t.Errorf("%s, %d ranks: nothing drafted", fam, len(ranges))
			}
		}
	}
}

// newDraftServer is a one-rank runner of target with draft loaded beside
// it as the draft model "draft".
func newDraftServer(t *testing.T, target, draft string) (*runner.Server, *runnerapi.Client, error) {
	t.Helper()
	s := runner.NewServer(runner.Config{ModelPath: target, Load: load, Token: "secret", Node: "node-a", DraftModelPath: draft, DraftID: "draft",
		Options: backend.Options{Threads: 2, BatchSize: 64, KVType: "f32", Parallel: 2}})
	if err := s.Load(context.Background()); err != nil {
		s.Close()
		return nil, nil, err
	}
	t.Cleanup(s.Close)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, &runnerapi.Client{Addr: strings.TrimPrefix(hs.URL, "http://"), Token: "secret"}, nil
}

// A draft model that is a copy of its target drafts what the target
// would say: greedy output identical to plain decoding, and (nearly) every
// draft accepted, for every family. A draft with another vocabulary is
// refused at load, naming the first token that differs.
func TestSpeculationDraftModel(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (every family with a draft model, on real ggml): runs in make test")
	}
	prompt := "the draft model drafts what the target says"
	for _, fam := range model.Families {
		t.Run(fam, func(t *testing.T) {
			path := genFamily(t, fam, "F32")
			_, c, err := newDraftServer(t, path, path)
			if err != nil {
				t.Fatal(err)
			}
			req := runnerapi.Request{Prompt: prompt, MaxTokens: 40, IgnoreEOS: true}
			plain, _, _ := complete(t, c, runnerapi.CompletionRequest{Request: req})
			// p_min 0: a random model's copy drafts at every probability.
			// min 4: a copy costs what it saves, so K from the costs
			// would draft little.
			req.Speculative = &runnerapi.Speculation{Draft: "draft", Max: 4, Min: 4, PMin: new(float64)}
			spec, _, done := complete(t, c, runnerapi.CompletionRequest{Request: req})
			t.Logf("%s: %d drafted, %d accepted", fam, done.DraftTokens, done.AcceptedDraftTokens)
			if !slices.Equal(plain, spec) {
				t.Errorf("the self-drafted output differs:\nplain %v\nspec  %v", plain, spec)
			}
			if done.DraftTokens < 20 || float64(done.AcceptedDraftTokens) < 0.9*float64(done.DraftTokens) {
				t.Errorf("%d of %d drafts accepted: a copy of the target should draft its tokens", done.AcceptedDraftTokens, done.DraftTokens)
			}
			// Through 3 ranks: the draft beside rank 0, the last rank
			// verifying.
			p := startPipelineDraft(t, path, [][2]int{{0, 1}, {1, 3}, {3, 4}}, 2, path)
			got, done, err := p.complete(t, runnerapi.CompletionRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s, 3 ranks: %d drafted, %d accepted", fam, done.DraftTokens, done.AcceptedDraftTokens)
			if !slices.Equal(got, plain) || done.AcceptedDraftTokens < done.DraftTokens*9/10 {
				t.Errorf("3 ranks, self-drafted: %v (%d of %d accepted), want %v", got, done.AcceptedDraftTokens, done.DraftTokens, plain)
			}
		})
	}
	o, _ := model.ApplyFamily(model.Presets["tiny"], "llama")
	o.Type, o.Vocab = "F32", 600
	other := filepath.Join(t.TempDir(), "other-vocab.gguf")
	if err := model.Generate(other, o); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newDraftServer(t, genModel(t, "F32"), other); err == nil || !strings.Contains(err.Error(), "vocabulary has 600 tokens") {
		t.Errorf("a draft with another vocabulary: %v", err)
	}
}
