package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Engine is what the Scheduler drives: every block of the model, on one
// rank (Local) or a pipeline of them (Pipeline), and the samplers after
// the last. It serves Options().Parallel slots, each a request with its
// own KV cache sequence. Its methods are called from one goroutine.
type Engine interface {
	Options() backend.Options
	// Begin starts a request in slot: the slot's cache is kept up to keep
	// positions (its cached prompt prefix) on every rank, and its sampler
	// seeded; traceID ("" for none) names the ranks' traces. It returns
	// how many positions were kept (0 when the cache could not keep them).
	Begin(ctx context.Context, slot int, req *runnerapi.Request, traceID string, keep int) (int, error)
	// Submit runs a step: rank 0's blocks, then on (a pipeline) or the
	// rest here (one rank). Spans go under each group's Parent.
	Submit(ctx context.Context, st *Step) error
	// Recv waits for the oldest submitted step that samples, and returns
	// it with what was sampled, one per sampling group.
	Recv(ctx context.Context) (*Step, []Sampled, error)
	// Depth is how many sampling steps may be in flight at once: the
	// number of ranks, so that each works on a different step.
	Depth() int
	// End finishes slot's request (err: how it failed, if it did).
	End(slot int, err error)
	// Forget drops an idle slot's cache on every rank, to make room.
	Forget(slot int) error
	// Shift drops slot's positions [keep, keep+discard) on every rank and
	// moves the later ones down (a context shift).
	Shift(slot, keep, discard int) error
}

// Step is one forward pass over rows of one or more slots.
type Step struct {
	Groups []Group
	sent   time.Time // when the scheduler submitted it
}

// rows is the step's row count.
func (st *Step) rows() int {
	n := 0
	for _, g := range st.Groups {
		n += len(g.Tokens)
	}
	return n
}

// Group is one slot's rows in a step: Tokens at positions Start….
type Group struct {
	Slot   int
	Tokens []int32
	Start  int
	// Sample asks for a token sampled after the last row; Decode says
	// the step is a decode step for this slot (else prefill). Embed makes
	// the rows an embedding job's: the last rank pools them, and Sample
	// then yields the pooled vector instead of a token.
	Sample, Decode, Embed bool
	// Draft > 0: the group's tokens after the first are drafted
	// (spec.go): every row's logits are verified in turn.
	Draft int
	// TokenIndex tags the spans; Parent is the slot's span of this step.
	TokenIndex int
	Parent     *trace.Token
}

// Sampled is what a step yields for a slot's sampling group: Tokens, the
// drafts the target accepted (of Drafted, 0 for a group without drafts)
// then the token it chose after them; with one Logprobs per token when the
// request asked for them (else nil). An embedding job's is its vector
// instead, and no tokens.
type Sampled struct {
	Slot      int
	Tokens    []int32
	Logprobs  []*runnerapi.Logprobs
	Drafted   int
	Embedding []float32
}

// sampling counts the groups that sample: the tokens the step yields.
func (st *Step) sampling() int {
	n := 0
	for _, g := range st.Groups {
		if g.Sample {
			n++
		}
	}
	return n
}

func (st *Step) samples() bool { return st.sampling() > 0 }

// embeds reports whether the step has rows of an embedding job.
func (st *Step) embeds() bool {
	for _, g := range st.Groups {
		if g.Embed {
			return true
		}
	}
	return false
}

// batch is the step's rows as a backend batch: positions, sequences, the
// output row of each sampling group, and every row of the embedding jobs.
func (st *Step) batch(tokens bool) backend.Batch {
	var b backend.Batch
	for _, g := range st.Groups {
		for i := range g.Tokens {
			if tokens {
				b.Tokens = append(b.Tokens, g.Tokens[i])
			}
			b.Positions = append(b.Positions, int32(g.Start+i))
			b.Seqs = append(b.Seqs, g.Slot)
			if g.Embed {
				b.Embeds = append(b.Embeds, int32(len(b.Positions)-1))
			}
		}
		switch {
		case g.Sample && g.Draft > 0: // every row is verified
			for i := range g.Tokens {
				b.Outputs = append(b.Outputs, int32(len(b.Positions)-len(g.Tokens)+i))
			}
		case g.Sample && !g.Embed:
			b.Outputs = append(b.Outputs, int32(len(b.Positions)-1))
		}
	}
	switch {
	case b.Outputs != nil:
	case b.Embeds != nil: // only embeddings: no logits
		b.Outputs = []int32{}
	default: // nothing sampled: the last row's logits, unused
		b.Outputs = []int32{int32(len(b.Positions) - 1)}
	}
	return b
}

// spans opens a child span of every group's parent; end closes them.
func (st *Step) spans(name, cat string) []trace.Token {
	ts := make([]trace.Token, len(st.Groups))
	for i, g := range st.Groups {
		ts[i] = g.Parent.Child(name, cat)
	}
	return ts
}

func (st *Step) end(ts []trace.Token, args func(g Group) trace.Args) {
	for i := range ts {
		ts[i].End(args(st.Groups[i]))
	}
}

func tokenArgs(g Group) trace.Args { return trace.Args{}.WithToken(g.TokenIndex) }

// commSpans records a forward pass's all-reduces in every group's trace:
// one "all-reduce" span each (in "comms", beside "compute"), with the
// bytes this rank sent.
func (st *Step) commSpans(ts []collective.Timing) {
	for _, t := range ts {
		for _, g := range st.Groups {
			c := g.Parent.ChildAt("all-reduce", "comms", t.Start)
			c.EndAt(trace.Args{}.WithBytes(int64(t.Bytes)).WithToken(g.TokenIndex), t.End)
		}
	}
}

// slotSampler is a slot's sampler and how many top logprobs it reports
// (-1: none); or, for an embedding job, its pooler.
type slotSampler struct {
	smp  *sample.Sampler
	nlp  int
	pool *pooler
}

// newSlotSampler is a request's sampler, constrained by its grammar with
// tok's vocabulary.
func newSlotSampler(opts sample.Options, spec *grammar.Spec, tok *tokenizer.Tokenizer, nlp int) (slotSampler, error) {
	// Checked again here: a pipeline's last rank takes them from a frame.
	if err := opts.Validate(); err != nil {
		return slotSampler{}, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
	}
	smp := sample.New(opts)
	if spec != nil {
		if tok == nil {
			return slotSampler{}, errors.New("grammar: the sampling rank has no tokenizer")
		}
		g, err := grammar.Compile(*spec)
		if err != nil {
			return slotSampler{}, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
		}
		smp.Constrain(grammar.NewMatcher(g, tok.GrammarVocab()))
	}
	return slotSampler{smp: smp, nlp: nlp}, nil
}

// sampleGroups samples one token per sampling group from logits (a row
// per sampling group, in order), recording a "sample" span under each; an
// embedding job's last group yields its pooled vector (poolGroups has
// taken its rows).
func sampleGroups(st *Step, logits []float32, vocab int, smps []slotSampler) ([]Sampled, error) {
	var out []Sampled
	k := 0
	for _, g := range st.Groups {
		if !g.Sample {
			continue
		}
		if g.Embed {
			v, err := smps[g.Slot].pool.vector()
			if err != nil {
				return nil, fmt.Errorf("slot %d: %w", g.Slot, err)
			}
			out = append(out, Sampled{Slot: g.Slot, Embedding: v})
			continue
		}
		rows := g.Draft + 1
		if (k+rows)*vocab > len(logits) {
			return nil, fmt.Errorf("%d logits for %d sampled rows of %d", len(logits), k+rows, vocab)
		}
		row := logits[k*vocab : (k+rows)*vocab]
		k += rows
		ss := smps[g.Slot]
		if ss.smp == nil {
			return nil, fmt.Errorf("slot %d sampled before its request began", g.Slot)
		}
		if g.Draft > 0 {
			sp := g.Parent.Child("verify", "sample")
			toks, lps, err := verifyGroup(g, row, vocab, ss)
			sp.End(tokenArgs(g))
			if err != nil {
				return nil, fmt.Errorf("slot %d: %w", g.Slot, err)
			}
			out = append(out, Sampled{Slot: g.Slot, Tokens: toks, Logprobs: lps, Drafted: g.Draft})
			continue
		}
		sp := g.Parent.Child("sample", "sample")
		id, err := ss.smp.Next(row)
		sp.End(tokenArgs(g))
		if err != nil {
			return nil, fmt.Errorf("slot %d: %w", g.Slot, err)
		}
		s := Sampled{Slot: g.Slot, Tokens: []int32{id}}
		if ss.nlp >= 0 {
			s.Logprobs = []*runnerapi.Logprobs{logprobsOf(row, id, ss.nlp)}
		}
		out = append(out, s)
	}
	return out, nil
}

// keepFrom forgets slot's cache from keep on, or all of it when a
// sliding-window cache cannot keep that much; it returns what it kept.
func keepFrom(f Forwarder, slot, keep int) (int, error) {
	err := f.Remove(slot, keep)
	if errors.Is(err, backend.ErrCannotKeep) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kv cache of slot %d: %w", slot, err)
	}
	return keep, nil
}

// Local is an Engine on one rank that holds every block.
type Local struct {
	F Forwarder
	// Tok is the vocabulary grammars constrain sampling with.
	Tok  *tokenizer.Tokenizer
	smps []slotSampler
	done []localResult
}

type localResult struct {
	st      *Step
	samples []Sampled
}

var _ Engine = (*Local)(nil)

func (l *Local) Options() backend.Options { return l.F.Options() }
func (l *Local) Depth() int               { return 1 }

func (l *Local) Begin(ctx context.Context, slot int, req *runnerapi.Request, traceID string, keep int) (int, error) {
	if l.smps == nil {
		l.smps = make([]slotSampler, max(l.F.Options().Parallel, 1))
	}
	if err := traceSlot(l.F, slot, traceID); err != nil {
		return 0, err
	}
	ss, err := beginSlot(req.Embed, l.F.Config(), req.Sample, req.Grammar, l.Tok, logprobsN(req))
	if err != nil {
		traceSlot(l.F, slot, "") // the scheduler ends no slot it could not begin
		return 0, err
	}
	l.smps[slot] = ss
	return keepFrom(l.F, slot, keep)
}

func (l *Local) Submit(ctx context.Context, st *Step) error {
	c := st.spans("compute", "compute")
	r, err := l.F.Forward(ctx, st.batch(true))
	st.end(c, tokenArgs)
	if cl, ok := l.F.(commLogger); ok {
		st.commSpans(cl.commTimings())
	}
	if err != nil {
		return err
	}
	if err := poolGroups(st, r.Embeds, l.F.Config().Dim, l.smps); err != nil {
		return err
	}
	if !st.samples() {
		return nil
	}
	samples, err := sampleGroups(st, r.Logits, l.F.Config().Vocab, l.smps)
	if err != nil {
		return err
	}
	l.done = append(l.done, localResult{st, samples})
	return nil
}

func (l *Local) Recv(ctx context.Context) (*Step, []Sampled, error) {
	if len(l.done) == 0 {
		return nil, nil, errors.New("no step in flight")
	}
	r := l.done[0]
	l.done = l.done[1:]
	return r.st, r.samples, nil
}

func (l *Local) Forget(slot int) error               { return l.F.Remove(slot, 0) }
func (l *Local) Shift(slot, keep, discard int) error { return l.F.Shift(slot, keep, discard) }

func (l *Local) End(slot int, err error) {
	if slot < len(l.smps) {
		l.smps[slot] = slotSampler{}
	}
	traceSlot(l.F, slot, "") // a lost group fails the next step
}

// verifyGroup runs a drafting group's verification over its rows' logits
// (rows: one per token of the group, vocab each): the accepted drafts,
// then the token the target chose after them; with each its logprobs
// (from the row it was decided on) when the request asked for them.
func verifyGroup(g Group, rows []float32, vocab int, ss slotSampler) ([]int32, []*runnerapi.Logprobs, error) {
	var toks []int32
	var lps []*runnerapi.Logprobs
	for i := range g.Draft + 1 {
		row := rows[i*vocab : (i+1)*vocab]
		var tok int32
		var ok bool
		var err error
		if i == g.Draft {
			tok, err = ss.smp.Next(row)
		} else {
			tok, ok, err = ss.smp.Verify(row, g.Tokens[i+1])
		}
		if err != nil {
			return nil, nil, err
		}
		toks = append(toks, tok)
		if ss.nlp >= 0 {
			lps = append(lps, logprobsOf(row, tok, ss.nlp))
		}
		if !ok {
			break
		}
	}
	return toks, lps, nil
}
