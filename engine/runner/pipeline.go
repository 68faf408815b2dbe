package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/sample"
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

// Stage serves rank Rank (1…N-1) of a pipeline: it reads frames from In,
// runs its blocks, and sends hidden states (or, on the last rank, the
// sampled token) on Out.
type Stage struct {
	F       Forwarder
	In, Out *Link
	Rank, N int
	// Node and NodeName stamp the spans.
	Node, NodeName string
	// OnTrace gets each traced request's spans when it ends (or when the
	// pipeline breaks during it, with the error).
	OnTrace func(traceID string, spans []trace.Span, err error)
}

// Serve runs until a link breaks or ctx ends; it returns why.
func (s *Stage) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.In.Close(); s.Out.Close() })
	defer stop()
	defer s.In.Close()
	defer s.Out.Close()
	var (
		smp     *sample.Sampler
		rec     *trace.Recorder
		traceID string
		req     uint64
		nlp     = -1        // top logprobs wanted (-1: none)
		phase   trace.Token // the current prefill or decode step's span
		open    bool
	)
	finish := func(err error) {
		if open {
			phase.End(trace.Args{})
			open = false
		}
		if rec != nil && s.OnTrace != nil {
			s.OnTrace(traceID, rec.Drain(0), err)
		}
		rec = nil
	}
	last := s.Rank == s.N-1
	next := (s.Rank + 1) % s.N
	cfg := s.F.Config()
	for {
		typ, payload, first, err := s.In.recvFrame()
		if err != nil {
			finish(err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		switch typ {
		case frameBegin:
			var b beginMsg
			if err := json.Unmarshal(payload, &b); err != nil {
				return fmt.Errorf("begin frame: %w", err)
			}
			finish(nil)
			req, traceID = b.Req, b.TraceID
			nlp = b.Logprobs - 1
			if nlp < 0 || nlp > MaxTopLogprobs {
				nlp = -1
			}
			smp = sample.New(b.Sample)
			if traceID != "" {
				rec = trace.NewRecorder(s.Rank, s.Node, trace.Options{NodeName: s.NodeName})
			}
			if err := s.F.Reset(); err != nil {
				return fmt.Errorf("reset kv cache: %w", err)
			}
			if !last {
				if err := s.Out.sendJSON(frameBegin, b); err != nil {
					finish(err)
					return err
				}
			}
		case frameEnd:
			finish(nil)
			if !last {
				if _, err := s.Out.send(frameEnd, func(b []byte) []byte { return append(b, payload...) }); err != nil {
					return err
				}
			}
		case frameAct:
			var m actMsg
			if err := m.unmarshal(payload, cfg.Dim); err != nil {
				return err
			}
			if m.Req != req {
				return fmt.Errorf("act for request %d during request %d", m.Req, req)
			}
			cat := "prefill"
			if m.Decode {
				cat = "decode"
			}
			// One span per step on this rank, holding recv, compute and
			// send (or sample) like rank 0's.
			if !open || m.Decode || !isPrefill(phase) {
				if open {
					phase.End(trace.Args{})
				}
				name := cat
				if m.Decode {
					name = fmt.Sprintf("token %d", m.Token)
				}
				phase, open = rec.StartAt(name, cat, first), true
			}
			tok := int(m.Token)
			recvSpan(&phase, fmt.Sprintf("recv ← rank %d", s.Rank-1), first,
				trace.Recv(s.Rank-1, int64(len(payload)+5), trace.FlowKey(s.Rank-1, s.Rank, uint64(m.Seq))).WithToken(tok))
			c := phase.Child("compute", "compute")
			res, err := s.F.Forward(ctx, backend.Batch{Hidden: m.Hidden, Positions: positions(int(m.Start), int(m.Start+m.N))})
			c.End(trace.Args{}.WithToken(tok))
			if err != nil {
				finish(err)
				return err
			}
			if last {
				if !m.Sample {
					if m.Decode {
						phase.End(trace.Args{}.WithToken(tok))
						open = false
					}
					continue
				}
				sp := phase.Child("sample", "sample")
				id, err := smp.Next(res.Logits)
				sp.End(trace.Args{}.WithToken(tok))
				if err != nil {
					finish(err)
					return err
				}
				t := tokenMsg{Req: m.Req, Seq: m.Seq, Token: id}
				if nlp >= 0 {
					t.Logprobs = logprobsOf(res.Logits, id, nlp)
				}
				snd := phase.Child("send → rank 0", "send")
				n, err := s.Out.send(frameToken, t.marshal)
				snd.End(trace.Send(0, int64(n), trace.FlowKey(s.Rank, 0, uint64(m.Seq))).WithToken(tok))
				if err != nil {
					finish(err)
					return err
				}
			} else {
				fwd := actMsg{Req: m.Req, Seq: m.Seq, Decode: m.Decode, Sample: m.Sample, Token: m.Token, Start: m.Start, N: m.N, Hidden: res.Hidden}
				snd := phase.Child(fmt.Sprintf("send → rank %d", next), "send")
				n, err := s.Out.send(frameAct, fwd.marshal)
				snd.End(trace.Send(next, int64(n), trace.FlowKey(s.Rank, next, uint64(m.Seq))).WithToken(tok))
				if err != nil {
					finish(err)
					return err
				}
			}
			if m.Decode || m.Sample {
				phase.End(trace.Args{}.WithToken(tok))
				open = false
			}
		default:
			return fmt.Errorf("%w: unknown frame type %d", ErrLinkLost, typ)
		}
	}
}

func isPrefill(t trace.Token) bool { return t.Category() == "prefill" }
