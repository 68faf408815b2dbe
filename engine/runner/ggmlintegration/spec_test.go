package ggmlintegration

import (
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
)

// Greedy output with prompt-lookup speculation is token for token the
// output without it, for every family gen-model writes (the sliding-window
// ones roll back inside their window), and drafts get accepted: a random
// model's greedy output falls into loops that lookup predicts.
func TestSpeculationGreedyIdentical(t *testing.T) {
	prompt := strings.Repeat("one two three four five six seven eight nine ten ", 4)
	drafted, accepted := 0, 0
	for _, fam := range model.Families {
		t.Run(fam, func(t *testing.T) {
			path := genFamily(t, fam, "F32")
			_, c := newServerOpts(t, path, backend.Options{Threads: 2, BatchSize: 64, KVType: "f32", Parallel: 2})
			req := runner.Request{Prompt: prompt, MaxTokens: 48, IgnoreEOS: true}
			plain, _, _ := complete(t, c, runner.CompletionRequest{Request: req})
			req.Speculative = &runner.Speculation{Draft: "ngram", Max: 6}
			spec, _, done := complete(t, c, runner.CompletionRequest{Request: req, TraceID: "spec-" + fam})
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
		req := runner.Request{Prompt: strings.Repeat("alpha beta gamma delta ", 5), MaxTokens: 32, IgnoreEOS: true}
		_, one := newServerOpts(t, path, backend.Options{Threads: 1, BatchSize: 16, KVType: "f32"})
		want, _, _ := complete(t, one, runner.CompletionRequest{Request: req})
		req.Speculative = &runner.Speculation{Draft: "ngram", Max: 4}
		for _, ranges := range [][][2]int{{{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}} {
			p := startPipelineN(t, path, ranges, 2)
			got, done, err := p.complete(t, runner.CompletionRequest{Request: req})
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
