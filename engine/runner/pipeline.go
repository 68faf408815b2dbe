package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// A pipeline of N ranks: rank 0 runs the scheduler (Pipeline is its
// Engine); ranks 1…N-1 serve their blocks in a loop (Stage.Serve). Rank r
// sends to rank r+1 on its out link and reads from rank r-1 on its in
// link; the last rank's out link goes back to rank 0 and carries tokens.
// Up to N sampling steps are in flight, each on a different rank.

// Pipeline is rank 0's Engine over a pipeline of Shape.Pipeline > 1
// stages (whose leaders' instance ranks traces name).
type Pipeline struct {
	F       Forwarder // rank 0's blocks
	Out, In *Link     // to stage 1, from the last stage
	Shape   runnerapi.Shape

	req     uint64
	slotReq map[int]uint64 // each slot's request, for its end frame
	seq     uint32
	pending []pendingStep // sampling steps sent, oldest first
	dead    error         // set once a link broke: the pipeline stays dead
}

type pendingStep struct {
	st  *Step
	seq uint32
}

var _ Engine = (*Pipeline)(nil)

func (p *Pipeline) Options() backend.Options { return p.F.Options() }
func (p *Pipeline) Depth() int               { return p.Shape.Pipeline }

func (p *Pipeline) Begin(ctx context.Context, slot int, req *runnerapi.Request, traceID string, keep int) (int, error) {
	if p.dead != nil {
		return 0, p.dead
	}
	p.req++
	if p.slotReq == nil {
		p.slotReq = map[int]uint64{}
	}
	p.slotReq[slot] = p.req
	if err := traceSlot(p.F, slot, traceID); err != nil { // rank 0's group
		return 0, p.fail(err)
	}
	kept, err := keepFrom(p.F, slot, keep)
	if err != nil {
		return 0, err
	}
	return kept, p.fail(p.Out.sendJSON(frameBegin, beginMsg{Req: p.req, Slot: slot, Keep: kept, Sample: req.Sample, TraceID: traceID,
		Logprobs: logprobsN(req) + 1, Grammar: req.Grammar, Embed: req.Embed}))
}

func (p *Pipeline) fail(err error) error {
	if err != nil && errors.Is(err, ErrLinkLost) {
		p.dead = err
		p.Out.Close()
		p.In.Close()
	}
	return err
}

func (p *Pipeline) Submit(ctx context.Context, st *Step) error {
	if p.dead != nil {
		return p.dead
	}
	c := st.spans("compute", "compute")
	r, err := p.F.Forward(ctx, st.batch(true))
	st.end(c, tokenArgs)
	if cl, ok := p.F.(commLogger); ok { // a stage that is a tensor-parallel group
		st.commSpans(cl.commTimings())
	}
	if err != nil {
		return err
	}
	p.seq++
	m := actMsg{Seq: p.seq, Hidden: r.Hidden}
	for _, g := range st.Groups {
		ag := actGroup{Slot: g.Slot, Decode: g.Decode, Sample: g.Sample, Embed: g.Embed, Token: uint32(g.TokenIndex),
			Start: uint32(g.Start), N: uint32(len(g.Tokens))}
		if g.Draft > 0 {
			ag.Drafts = g.Tokens[1:]
		}
		m.Groups = append(m.Groups, ag)
	}
	to := p.Shape.Rank(1, 0)
	s := st.spans(fmt.Sprintf("send → rank %d", to), "send")
	n, err := p.Out.send(frameAct, m.marshal)
	seq := p.seq
	st.end(s, func(g Group) trace.Args {
		return trace.Send(to, int64(n), trace.FlowKey(0, 1, uint64(seq))).WithToken(g.TokenIndex)
	})
	if err != nil {
		return p.fail(err)
	}
	if st.samples() {
		p.pending = append(p.pending, pendingStep{st, seq})
	}
	return nil
}

// Recv reads the last rank's tokens of the oldest sampling step; the recv
// spans start when its frame began to arrive.
func (p *Pipeline) Recv(ctx context.Context) (*Step, []Sampled, error) {
	if p.dead != nil {
		return nil, nil, p.dead
	}
	if len(p.pending) == 0 {
		return nil, nil, errors.New("no step in flight")
	}
	ps := p.pending[0]
	p.pending = p.pending[1:]
	typ, payload, first, err := p.In.recvFrame()
	if err != nil {
		return nil, nil, p.fail(err)
	}
	last := p.Shape.Pipeline - 1
	if typ != frameToken {
		return nil, nil, p.fail(fmt.Errorf("%w: frame type %d from rank %d, want tokens", ErrLinkLost, typ, last))
	}
	var t tokenMsg
	if err := t.unmarshal(payload); err != nil || t.Seq != ps.seq || len(t.Samples) != ps.st.sampling() {
		return nil, nil, p.fail(fmt.Errorf("%w: token frame of step %d with %d samples (%v), want step %d", ErrLinkLost, t.Seq, len(t.Samples), err, ps.seq))
	}
	k := 0
	for _, g := range ps.st.Groups {
		if !g.Sample {
			continue
		}
		// The scheduler trusts a sample's slot and drafts: it trims the
		// slot's history by the drafts rejected.
		if smp := t.Samples[k]; smp.Slot != g.Slot || smp.Drafted != g.Draft || len(smp.Tokens) > g.Draft+1 {
			return nil, nil, p.fail(fmt.Errorf("%w: token frame of step %d: sample %d for slot %d with %d of %d drafts, want slot %d with %d",
				ErrLinkLost, t.Seq, k, smp.Slot, len(smp.Tokens)-1, smp.Drafted, g.Slot, g.Draft))
		}
		k++
		recvSpan(g.Parent, fmt.Sprintf("recv ← rank %d", p.Shape.Rank(last, 0)), first,
			trace.Recv(p.Shape.Rank(last, 0), int64(len(payload)+5), trace.FlowKey(last, 0, uint64(ps.seq))).WithToken(g.TokenIndex))
	}
	return ps.st, t.Samples, nil
}

func (p *Pipeline) End(slot int, err error) {
	traceSlot(p.F, slot, "")
	if p.dead == nil {
		p.fail(p.Out.sendJSON(frameEnd, endMsg{Req: p.slotReq[slot], Slot: slot}))
	}
}

// Forget drops an idle slot's cache here and, with an end frame that says
// so, on the other ranks.
func (p *Pipeline) Forget(slot int) error {
	if p.dead != nil {
		return p.dead
	}
	if err := p.F.Remove(slot, 0); err != nil {
		return err
	}
	return p.fail(p.Out.sendJSON(frameEnd, endMsg{Req: p.slotReq[slot], Slot: slot, Forget: true}))
}

// Shift shifts slot's cache here and, with a shift frame, on the other
// ranks, before any later step of the slot.
func (p *Pipeline) Shift(slot, keep, discard int) error {
	if p.dead != nil {
		return p.dead
	}
	if err := p.F.Shift(slot, keep, discard); err != nil {
		return err
	}
	return p.fail(p.Out.sendJSON(frameShift, shiftMsg{Slot: slot, Keep: keep, Discard: discard}))
}

// Rollback drops slot's positions from keep on here and, with a rollback
// frame, on the other ranks, before any later step of the slot.
func (p *Pipeline) Rollback(slot, keep int) error {
	if p.dead != nil {
		return p.dead
	}
	if err := p.F.Remove(slot, keep); err != nil {
		return err
	}
	return p.fail(p.Out.sendJSON(frameBack, rollbackMsg{Slot: slot, Keep: keep}))
}

// recvSpan records a receive that began at first and ends now.
func recvSpan(parent *trace.Token, name string, first time.Time, args trace.Args) {
	c := parent.ChildAt(name, "recv", first)
	c.End(args)
}
