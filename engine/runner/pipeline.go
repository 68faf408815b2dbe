package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// A pipeline of N ranks: rank 0 runs the generation loop (Pipeline, a
// Model); ranks 1…N-1 serve their blocks in a loop (Stage.Serve). Rank r
// sends to rank r+1 on its out link and reads from rank r-1 on its in
// link; the last rank's out link goes back to rank 0 and carries tokens.

// Pipeline is rank 0's Model over a pipeline of N > 1 ranks.
type Pipeline struct {
	F       Forwarder // rank 0's blocks
	Out, In *Link     // to rank 1, from rank N-1
	N       int

	req  uint64
	seq  uint32
	dead error // set once a link broke: the pipeline stays dead
}

var _ Model = (*Pipeline)(nil)

func (p *Pipeline) Options() backend.Options { return p.F.Options() }

func (p *Pipeline) Begin(ctx context.Context, req *Request, traceID string) error {
	if p.dead != nil {
		return p.dead
	}
	p.req++
	p.seq = 0
	if err := p.F.Reset(); err != nil {
		return fmt.Errorf("reset kv cache: %w", err)
	}
	return p.fail(p.Out.sendJSON(frameBegin, beginMsg{Req: p.req, Sample: req.Sample, TraceID: traceID, Logprobs: req.logprobsN() + 1}))
}

func (p *Pipeline) fail(err error) error {
	if err != nil && errors.Is(err, ErrLinkLost) {
		p.dead = err
		p.Out.Close()
		p.In.Close()
	}
	return err
}

func (p *Pipeline) Step(ctx context.Context, tokens []int32, start int, smp, decode bool, parent *trace.Token, tokenIndex int) (int32, *Logprobs, error) {
	if p.dead != nil {
		return 0, nil, p.dead
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	c := parent.Child("compute", "compute")
	r, err := p.F.Forward(ctx, backend.Batch{Tokens: tokens, Positions: positions(start, start+len(tokens))})
	c.End(trace.Args{}.WithToken(tokenIndex))
	if err != nil {
		return 0, nil, err
	}
	p.seq++
	m := actMsg{Req: p.req, Seq: p.seq, Decode: decode, Sample: smp, Token: uint32(tokenIndex), Start: uint32(start),
		N: uint32(len(tokens)), Hidden: r.Hidden}
	s := parent.Child("send → rank 1", "send")
	n, err := p.Out.send(frameAct, m.marshal)
	s.End(trace.Send(1, int64(n), trace.FlowKey(0, 1, uint64(p.seq))).WithToken(tokenIndex))
	if err != nil {
		return 0, nil, p.fail(err)
	}
	if !smp {
		return 0, nil, nil
	}
	// Wait for the token from the last rank; the recv span starts when
	// its frame begins to arrive.
	typ, payload, first, err := p.In.recvFrame()
	if err != nil {
		return 0, nil, p.fail(err)
	}
	last := p.N - 1
	recvSpan(parent, fmt.Sprintf("recv ← rank %d", last), first, trace.Recv(last, int64(len(payload)+5), trace.FlowKey(last, 0, uint64(p.seq))).WithToken(tokenIndex))
	if typ != frameToken {
		return 0, nil, p.fail(fmt.Errorf("%w: frame type %d from rank %d, want a token", ErrLinkLost, typ, last))
	}
	var t tokenMsg
	if err := t.unmarshal(payload); err != nil || t.Req != p.req || t.Seq != p.seq {
		return 0, nil, p.fail(fmt.Errorf("%w: token frame %+v (%v) for request %d step %d", ErrLinkLost, t, err, p.req, p.seq))
	}
	return t.Token, t.Logprobs, nil
}

func (p *Pipeline) End(ctx context.Context, err error) {
	if p.dead == nil {
		p.fail(p.Out.sendJSON(frameEnd, endMsg{Req: p.req}))
	}
}

// recvSpan records a receive that began at first and ends now.
func recvSpan(parent *trace.Token, name string, first time.Time, args trace.Args) {
	c := parent.ChildAt(name, "recv", first)
	c.End(args)
}
