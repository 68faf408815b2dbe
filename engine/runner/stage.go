package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Ranks 1…N-1 of a pipeline: Stage.Serve's loop over the frames of rank 0's
// steps.

// Stage serves stage Rank (1…Shape.Pipeline-1) of a pipeline: it reads
// frames from In, runs its blocks, and sends hidden states (or, on the
// last stage, the sampled tokens) on Out. Traces name each stage by its
// leader's instance rank (Shape.Rank(stage, 0)).
type Stage struct {
	F       Forwarder
	In, Out *Link
	Rank    int
	Shape   runnerapi.Shape
	// Mesh is this stage's group, whose links' bytes traces sample.
	Mesh *collective.Mesh
	// Node and NodeName stamp the spans.
	Node, NodeName string
	// OnTrace gets each traced request's spans and counter samples (its
	// outbound link's bytes) when it ends (or when the pipeline breaks
	// during it, with the error).
	OnTrace func(traceID string, spans []trace.Span, counters []trace.CounterSample, err error)
	// Tok is the vocabulary grammars constrain sampling with (the last
	// rank samples).
	Tok *tokenizer.Tokenizer
}

// Serve runs until a link breaks or ctx ends; it returns why.
func (s *Stage) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.In.Close(); s.Out.Close() })
	defer stop()
	defer s.In.Close()
	defer s.Out.Close()
	r := &stageRun{s: s, last: s.Rank == s.Shape.Pipeline-1, next: (s.Rank + 1) % s.Shape.Pipeline, dim: s.F.Config().Dim,
		slots: make([]stageSlot, max(s.F.Options().Parallel, 1)), smps: make([]slotSampler, max(s.F.Options().Parallel, 1))}
	for {
		typ, payload, first, err := s.In.recvFrame()
		if err != nil {
			r.finishAll(err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		switch typ {
		case frameBegin:
			err = r.begin(payload)
		case frameEnd:
			err = r.end(payload)
		case frameShift:
			err = r.shift(payload)
		case frameBack:
			err = r.rollback(payload)
		case frameAct:
			err = r.act(ctx, payload, first)
		default:
			return fmt.Errorf("%w: unknown frame type %d", ErrLinkLost, typ)
		}
		if err != nil {
			r.finishAll(err)
			return err
		}
	}
}

// stageRun is Serve's state: the slots' requests, samplers and traces.
type stageRun struct {
	s     *Stage
	last  bool // the last rank samples and sends tokens back to rank 0
	next  int  // the rank Out goes to
	dim   int  // hidden state width
	slots []stageSlot
	smps  []slotSampler
}

// stageSlot is one slot's request on this rank: its trace and the span of
// its current step.
type stageSlot struct {
	rec      *trace.Recorder
	stopLink func() // ends the sampling of Out's bytes
	traceID  string
	phase    trace.Token
	open     bool
}

// finish ends slot's trace, handing its spans to OnTrace.
func (r *stageRun) finish(slot int, err error) {
	ss := &r.slots[slot]
	if ss.open {
		ss.phase.End(trace.Args{})
		ss.open = false
	}
	if ss.stopLink != nil {
		ss.stopLink()
		ss.stopLink = nil
	}
	if ss.rec != nil && r.s.OnTrace != nil {
		r.s.OnTrace(ss.traceID, ss.rec.Drain(0), ss.rec.DrainCounters(), err)
	}
	if ss.rec != nil {
		traceSlot(r.s.F, slot, "") // this stage's group; a lost one fails the next step
	}
	ss.rec = nil
}

func (r *stageRun) finishAll(err error) {
	for i := range r.slots {
		r.finish(i, err)
	}
}

// begin starts a request in a slot: its sampler, its trace and its kept
// cache prefix; all but the last rank pass the frame on.
func (r *stageRun) begin(payload []byte) error {
	var b beginMsg
	if err := json.Unmarshal(payload, &b); err != nil {
		return fmt.Errorf("begin frame: %w", err)
	}
	if b.Slot < 0 || b.Slot >= len(r.slots) {
		return fmt.Errorf("begin frame for slot %d of %d", b.Slot, len(r.slots))
	}
	r.finish(b.Slot, nil)
	nlp := b.Logprobs - 1
	if nlp < 0 || nlp > runnerapi.MaxTopLogprobs {
		nlp = -1
	}
	if r.last {
		smp, err := beginSlot(b.Embed, r.s.F.Config(), b.Sample, b.Grammar, r.s.Tok, nlp)
		if err != nil {
			return fmt.Errorf("begin frame for slot %d: %w", b.Slot, err)
		}
		r.smps[b.Slot] = smp
	}
	ss := &r.slots[b.Slot]
	ss.traceID = b.TraceID
	if b.TraceID != "" {
		if err := traceSlot(r.s.F, b.Slot, b.TraceID); err != nil {
			return err
		}
		ss.rec = trace.NewRecorder(r.s.Rank, r.s.Node, trace.Options{NodeName: r.s.NodeName})
		stopOut := sampleLink(ss.rec, r.s.Out, r.s.Shape.Rank(r.next, 0))
		stopMesh := sampleMesh(ss.rec, r.s.Mesh, r.s.Shape.Rank(r.s.Rank, 0))
		ss.stopLink = func() { stopOut(); stopMesh() }
	}
	// Rank 0 kept what it could; every rank holds the same positions, so
	// keeping them here cannot fail.
	if err := r.s.F.Remove(b.Slot, b.Keep); err != nil {
		return fmt.Errorf("kv cache of slot %d from %d: %w", b.Slot, b.Keep, err)
	}
	if !r.last {
		return r.s.Out.sendJSON(frameBegin, b)
	}
	return nil
}

// end ends a slot's request; all but the last rank pass the frame on.
func (r *stageRun) end(payload []byte) error {
	var e endMsg
	if err := json.Unmarshal(payload, &e); err != nil || e.Slot < 0 || e.Slot >= len(r.slots) {
		return fmt.Errorf("end frame %s: %v", payload, err)
	}
	r.finish(e.Slot, nil)
	r.smps[e.Slot] = slotSampler{}
	if e.Forget {
		if err := r.s.F.Remove(e.Slot, 0); err != nil {
			return fmt.Errorf("forget slot %d: %w", e.Slot, err)
		}
	}
	if !r.last {
		_, err := r.s.Out.send(frameEnd, func(b []byte) []byte { return append(b, payload...) })
		return err
	}
	return nil
}

// shift applies a slot's context shift; all but the last rank pass the
// frame on.
func (r *stageRun) shift(payload []byte) error {
	var m shiftMsg
	if err := json.Unmarshal(payload, &m); err != nil || m.Slot < 0 || m.Slot >= len(r.slots) {
		return fmt.Errorf("shift frame %s: %v", payload, err)
	}
	if err := r.s.F.Shift(m.Slot, m.Keep, m.Discard); err != nil {
		return fmt.Errorf("shift slot %d: %w", m.Slot, err)
	}
	if !r.last {
		_, err := r.s.Out.send(frameShift, func(b []byte) []byte { return append(b, payload...) })
		return err
	}
	return nil
}

// rollback drops a slot's rejected drafts; all but the last rank pass the
// frame on.
func (r *stageRun) rollback(payload []byte) error {
	var m rollbackMsg
	if err := json.Unmarshal(payload, &m); err != nil || m.Slot < 0 || m.Slot >= len(r.slots) || m.Keep < 0 {
		return fmt.Errorf("rollback frame %s: %v", payload, err)
	}
	if err := r.s.F.Remove(m.Slot, m.Keep); err != nil {
		return fmt.Errorf("roll back slot %d to %d: %w", m.Slot, m.Keep, err)
	}
	if !r.last {
		_, err := r.s.Out.send(frameBack, func(b []byte) []byte { return append(b, payload...) })
		return err
	}
	return nil
}

// act runs this rank's blocks on a step's hidden states, then samples (last
// rank) or passes the result on.
func (r *stageRun) act(ctx context.Context, payload []byte, first time.Time) error {
	s := r.s
	var m actMsg
	if err := m.unmarshal(payload, r.dim); err != nil {
		return err
	}
	st := &Step{}
	for _, g := range m.Groups {
		if g.Slot >= len(r.slots) {
			return fmt.Errorf("act frame for slot %d of %d", g.Slot, len(r.slots))
		}
		parent := r.startStep(g, first)
		toks := make([]int32, g.N) // the rows; the last rank verifies the drafts among them
		copy(toks[1:], g.Drafts)
		st.Groups = append(st.Groups, Group{Slot: g.Slot, Tokens: toks, Start: int(g.Start), Sample: g.Sample,
			Decode: g.Decode, Embed: g.Embed, Draft: len(g.Drafts), TokenIndex: int(g.Token), Parent: parent})
		from := s.Shape.Rank(s.Rank-1, 0)
		recvSpan(parent, fmt.Sprintf("recv ← rank %d", from), first,
			trace.Recv(from, int64(len(payload)+5), trace.FlowKey(s.Rank-1, s.Rank, uint64(m.Seq))).WithToken(int(g.Token)))
	}
	c := st.spans("compute", "compute")
	b := st.batch(false)
	b.Hidden = m.Hidden
	res, err := s.F.Forward(ctx, b)
	st.end(c, tokenArgs)
	if cl, ok := s.F.(commLogger); ok { // a stage that is a tensor-parallel group
		st.commSpans(cl.commTimings())
	}
	if err != nil {
		return err
	}
	if r.last {
		err = r.sendTokens(st, m.Seq, res)
	} else {
		err = r.forward(st, &m, res)
	}
	if err != nil {
		return err
	}
	for _, g := range st.Groups {
		if g.Decode || g.Sample {
			r.slots[g.Slot].phase.End(tokenArgs(g))
			r.slots[g.Slot].open = false
		}
	}
	return nil
}

// startStep opens the slot's step span unless it continues the prefill:
// one span per step on this rank, holding recv, compute and send (or
// sample) like rank 0's.
func (r *stageRun) startStep(g actGroup, first time.Time) *trace.Token {
	ss := &r.slots[g.Slot]
	if ss.open && !g.Decode && isPrefill(ss.phase) {
		return &ss.phase
	}
	if ss.open {
		ss.phase.End(trace.Args{})
	}
	cat, name := "prefill", "prefill"
	if g.Decode {
		cat, name = "decode", fmt.Sprintf("token %d", g.Token)
	}
	ss.phase, ss.open = ss.rec.StartAt(name, cat, first), true
	return &ss.phase
}

// sendTokens pools the step's embedding rows, samples its tokens and
// sends them to rank 0.
func (r *stageRun) sendTokens(st *Step, seq uint32, res backend.Result) error {
	if err := poolGroups(st, res.Embeds, r.s.F.Config().Dim, r.smps); err != nil {
		return err
	}
	if !st.samples() {
		return nil
	}
	samples, err := sampleGroups(st, res.Logits, r.s.F.Config().Vocab, r.smps)
	if err != nil {
		return err
	}
	t := tokenMsg{Seq: seq, Samples: samples}
	snd := st.spans("send → rank 0", "send")
	n, err := r.s.Out.send(frameToken, t.marshal)
	st.end(snd, func(g Group) trace.Args {
		return trace.Send(0, int64(n), trace.FlowKey(r.s.Rank, 0, uint64(seq))).WithToken(g.TokenIndex)
	})
	return err
}

// forward sends the step's hidden states on to the next rank.
func (r *stageRun) forward(st *Step, m *actMsg, res backend.Result) error {
	fwd := actMsg{Seq: m.Seq, Groups: m.Groups, Hidden: res.Hidden}
	to := r.s.Shape.Rank(r.next, 0)
	snd := st.spans(fmt.Sprintf("send → rank %d", to), "send")
	n, err := r.s.Out.send(frameAct, fwd.marshal)
	st.end(snd, func(g Group) trace.Args {
		return trace.Send(to, int64(n), trace.FlowKey(r.s.Rank, r.next, uint64(m.Seq))).WithToken(g.TokenIndex)
	})
	return err
}

func isPrefill(t trace.Token) bool { return t.Category() == "prefill" }
