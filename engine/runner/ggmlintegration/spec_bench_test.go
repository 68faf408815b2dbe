package ggmlintegration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
)

// BenchmarkSpeculation decodes 128 greedy tokens of a repetitive prompt
// on one rank, without speculation and with prompt lookup (max 4 and 8),
// side by side in one run, and reports each one's decode tok/s, the
// speed-up and the acceptance. The model is $ORRERY_SPEC_BENCH_MODEL, or
// the small preset (8 layers, dim 512, Q8_0). Random weights: the
// acceptance is what lookup finds in such a model's loops, not a trained
// model's; make spec-bench runs it.
func BenchmarkSpeculation(b *testing.B) {
	path := os.Getenv("ORRERY_SPEC_BENCH_MODEL")
	if path == "" {
		o := model.Presets["small"]
		o.Seed = 3
		path = filepath.Join(b.TempDir(), "small.gguf")
		if err := model.Generate(path, o); err != nil {
			b.Fatal(err)
		}
	}
	_, c := newServerOpts(b, path, backend.Options{Threads: 2, KVType: "f16"})
	prompt := strings.Repeat("The agents measure every link and record a trace of every job. ", 8)
	run := func(spec *runner.Speculation) runner.Result {
		req := runner.CompletionRequest{Request: runner.Request{Prompt: prompt, MaxTokens: 128, IgnoreEOS: true, Speculative: spec}}
		done, err := c.Complete(context.Background(), req, func(runner.Piece) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		return done.Result
	}
	run(nil) // warm the prefix cache and the weights
	type arm struct {
		name string
		spec *runner.Speculation
		tps  float64
		d, a int
	}
	arms := []*arm{{name: "plain"}, {name: "ngram4", spec: &runner.Speculation{Draft: "ngram", Max: 4}},
		{name: "ngram8", spec: &runner.Speculation{Draft: "ngram", Max: 8}}}
	for b.Loop() {
		for _, a := range arms {
			r := run(a.spec)
			a.tps += r.DecodeTokPerSec()
			a.d += r.DraftTokens
			a.a += r.AcceptedDraftTokens
		}
	}
	n := float64(b.N)
	for _, a := range arms {
		b.ReportMetric(a.tps/n, a.name+"-tok/s")
		if a.spec != nil {
			b.ReportMetric(a.tps/arms[0].tps, a.name+"-speedup")
			b.ReportMetric(float64(a.a)/float64(max(a.d, 1)), a.name+"-accept")
		}
	}
}
