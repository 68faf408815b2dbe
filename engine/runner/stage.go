package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Ranks 1…N-1 of a pipeline: Stage.Serve's loop over the frames of rank 0's
// requests.

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
	r := &stageRun{s: s, nlp: -1, last: s.Rank == s.N-1, next: (s.Rank + 1) % s.N, dim: s.F.Config().Dim}
	for {
		typ, payload, first, err := s.In.recvFrame()
		if err != nil {
			r.finish(err)
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
		case frameAct:
			err = r.act(ctx, payload, first)
		default:
			return fmt.Errorf("%w: unknown frame type %d", ErrLinkLost, typ)
		}
		if err != nil {
			return err
		}
	}
}

// stageRun is Serve's state: the request in flight, its sampler and trace,
// and the span of its current step.
type stageRun struct {
	s    *Stage
	last bool // the last rank samples and sends tokens back to rank 0
	next int  // the rank Out goes to
	dim  int  // hidden state width

	smp     *sample.Sampler
	rec     *trace.Recorder
	traceID string
	req     uint64
	nlp     int         // top logprobs wanted (-1: none)
	phase   trace.Token // the current prefill or decode step's span
	open    bool
}

// finish ends the request's trace, handing its spans to OnTrace.
func (r *stageRun) finish(err error) {
	if r.open {
		r.phase.End(trace.Args{})
		r.open = false
	}
	if r.rec != nil && r.s.OnTrace != nil {
		r.s.OnTrace(r.traceID, r.rec.Drain(0), err)
	}
	r.rec = nil
}

// begin starts a request: its sampler, its trace and an empty KV cache; all
// but the last rank pass the frame on.
func (r *stageRun) begin(payload []byte) error {
	var b beginMsg
	if err := json.Unmarshal(payload, &b); err != nil {
		return fmt.Errorf("begin frame: %w", err)
	}
	r.finish(nil)
	r.req, r.traceID = b.Req, b.TraceID
	r.nlp = b.Logprobs - 1
	if r.nlp < 0 || r.nlp > MaxTopLogprobs {
		r.nlp = -1
	}
	r.smp = sample.New(b.Sample)
	if r.traceID != "" {
		r.rec = trace.NewRecorder(r.s.Rank, r.s.Node, trace.Options{NodeName: r.s.NodeName})
	}
	if err := r.s.F.Reset(); err != nil {
		return fmt.Errorf("reset kv cache: %w", err)
	}
	if !r.last {
		if err := r.s.Out.sendJSON(frameBegin, b); err != nil {
			r.finish(err)
			return err
		}
	}
	return nil
}

// end ends a request; all but the last rank pass the frame on.
func (r *stageRun) end(payload []byte) error {
	r.finish(nil)
	if !r.last {
		if _, err := r.s.Out.send(frameEnd, func(b []byte) []byte { return append(b, payload...) }); err != nil {
			return err
		}
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
	if m.Req != r.req {
		return fmt.Errorf("act for request %d during request %d", m.Req, r.req)
	}
	r.startStep(&m, first)
	tok := int(m.Token)
	recvSpan(&r.phase, fmt.Sprintf("recv ← rank %d", s.Rank-1), first,
		trace.Recv(s.Rank-1, int64(len(payload)+5), trace.FlowKey(s.Rank-1, s.Rank, uint64(m.Seq))).WithToken(tok))
	c := r.phase.Child("compute", "compute")
	res, err := s.F.Forward(ctx, backend.Batch{Hidden: m.Hidden, Positions: positions(int(m.Start), int(m.Start+m.N))})
	c.End(trace.Args{}.WithToken(tok))
	if err != nil {
		r.finish(err)
		return err
	}
	if r.last {
		if !m.Sample {
			if m.Decode {
				r.phase.End(trace.Args{}.WithToken(tok))
				r.open = false
			}
			return nil
		}
		err = r.sendToken(&m, res)
	} else {
		err = r.forward(&m, res)
	}
	if err != nil {
		r.finish(err)
		return err
	}
	if m.Decode || m.Sample {
		r.phase.End(trace.Args{}.WithToken(tok))
		r.open = false
	}
	return nil
}

// startStep opens the step's span unless it continues the prefill: one span
// per step on this rank, holding recv, compute and send (or sample) like
// rank 0's.
func (r *stageRun) startStep(m *actMsg, first time.Time) {
	if r.open && !m.Decode && isPrefill(r.phase) {
		return
	}
	if r.open {
		r.phase.End(trace.Args{})
	}
	cat := "prefill"
	if m.Decode {
		cat = "decode"
	}
	name := cat
	if m.Decode {
		name = fmt.Sprintf("token %d", m.Token)
	}
	r.phase, r.open = r.rec.StartAt(name, cat, first), true
}

// sendToken samples the step's token and sends it to rank 0.
func (r *stageRun) sendToken(m *actMsg, res backend.Result) error {
	tok := int(m.Token)
	sp := r.phase.Child("sample", "sample")
	id, err := r.smp.Next(res.Logits)
	sp.End(trace.Args{}.WithToken(tok))
	if err != nil {
		return err
	}
	t := tokenMsg{Req: m.Req, Seq: m.Seq, Token: id}
	if r.nlp >= 0 {
		t.Logprobs = logprobsOf(res.Logits, id, r.nlp)
	}
	snd := r.phase.Child("send → rank 0", "send")
	n, err := r.s.Out.send(frameToken, t.marshal)
	snd.End(trace.Send(0, int64(n), trace.FlowKey(r.s.Rank, 0, uint64(m.Seq))).WithToken(tok))
	return err
}

// forward sends the step's hidden states on to the next rank.
func (r *stageRun) forward(m *actMsg, res backend.Result) error {
	tok := int(m.Token)
	fwd := actMsg{Req: m.Req, Seq: m.Seq, Decode: m.Decode, Sample: m.Sample, Token: m.Token, Start: m.Start, N: m.N, Hidden: res.Hidden}
	snd := r.phase.Child(fmt.Sprintf("send → rank %d", r.next), "send")
	n, err := r.s.Out.send(frameAct, fwd.marshal)
	snd.End(trace.Send(r.next, int64(n), trace.FlowKey(r.s.Rank, r.next, uint64(m.Seq))).WithToken(tok))
	return err
}

func isPrefill(t trace.Token) bool { return t.Category() == "prefill" }
