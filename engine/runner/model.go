package runner

import (
	"context"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Model is what generation drives: every block of the model, on one rank
// or a pipeline of them, and the sampler after the last.
type Model interface {
	Options() backend.Options
	// Begin starts a request: every rank's KV cache is reset and the
	// sampler seeded; traceID ("" for none) names the ranks' traces.
	Begin(ctx context.Context, req *Request, traceID string) error
	// Step runs tokens at positions start… through every block. When
	// sample is set it returns the token sampled from the last position,
	// and its logprobs when the request asked for them (else nil).
	// Spans go under parent (compute, send, recv, sample), tagged with
	// tokenIndex; decode says which phase the step is in.
	Step(ctx context.Context, tokens []int32, start int, sample, decode bool, parent *trace.Token, tokenIndex int) (int32, *Logprobs, error)
	// End finishes the request (err: how it failed, if it did).
	End(ctx context.Context, err error)
}

// Local is a Model on one rank that holds every block.
type Local struct {
	F   Forwarder
	smp *sample.Sampler
	lp  int // top logprobs wanted (-1: no logprobs)
}

var _ Model = (*Local)(nil)

func (l *Local) Options() backend.Options { return l.F.Options() }

func (l *Local) Begin(ctx context.Context, req *Request, traceID string) error {
	l.smp = sample.New(req.Sample)
	l.lp = req.logprobsN()
	if err := l.F.Reset(); err != nil {
		return fmt.Errorf("reset kv cache: %w", err)
	}
	return nil
}

func (l *Local) Step(ctx context.Context, tokens []int32, start int, smp, decode bool, parent *trace.Token, tokenIndex int) (int32, *Logprobs, error) {
	c := parent.Child("compute", "compute")
	r, err := l.F.Forward(ctx, backend.Batch{Tokens: tokens, Positions: positions(start, start+len(tokens))})
	c.End(trace.Args{}.WithToken(tokenIndex))
	if err != nil || !smp {
		return 0, nil, err
	}
	s := parent.Child("sample", "sample")
	id, err := l.smp.Next(r.Logits)
	var lp *Logprobs
	if err == nil && l.lp >= 0 {
		lp = logprobsOf(r.Logits, id, l.lp)
	}
	s.End(trace.Args{}.WithToken(tokenIndex))
	return id, lp, err
}

func (l *Local) End(context.Context, error) {}
