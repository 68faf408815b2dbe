package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// memConn is a net.Conn reading from a fixed buffer (a unit-test double).
type memConn struct {
	r *bytes.Reader
	net.Conn
}

func (c memConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c memConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c memConn) Close() error                     { return nil }
func (c memConn) SetDeadline(time.Time) error      { return nil }
func (c memConn) SetReadDeadline(time.Time) error  { return nil }
func (c memConn) SetWriteDeadline(time.Time) error { return nil }

// Whatever bytes arrive on a rank link, frames parse or fail with an
// error, never a panic or an oversized allocation; an act frame that
// parses marshals back to the same bytes.
func FuzzLinkFrames(f *testing.F) {
	act := actMsg{Seq: 2, Groups: []actGroup{{Slot: 1, Decode: true, Sample: true, Token: 7, Start: 9, N: 1}, {Slot: 0, Start: 0, N: 1}},
		Hidden: []float32{1, -2, 3.5, 0}}
	f.Add(append([]byte{frameAct, 0, 0, 0, 0}, act.marshal(nil)...), 2)
	tok := tokenMsg{Seq: 4, Samples: []Sampled{{Slot: 0, Tokens: []int32{42}}}}
	f.Add(append([]byte{frameToken, 0, 0, 0, 0}, tok.marshal(nil)...), 2)
	tok.Samples = append(tok.Samples, Sampled{Slot: 3, Tokens: []int32{9}, Logprobs: []*runnerapi.Logprobs{{TokenLogprob: runnerapi.TokenLogprob{Token: 9, Logprob: -1.5},
		Top: []runnerapi.TokenLogprob{{Token: 9, Logprob: -1.5}, {Token: 7, Logprob: -2}}}}})
	f.Add(append([]byte{frameToken, 0, 0, 0, 0}, tok.marshal(nil)...), 2)
	tok.Samples = append(tok.Samples, Sampled{Slot: 5, Embedding: []float32{0.6, -0.8}})
	f.Add(append([]byte{frameToken, 0, 0, 0, 0}, tok.marshal(nil)...), 2)
	emb := actMsg{Seq: 3, Groups: []actGroup{{Slot: 2, Sample: true, Embed: true, Start: 4, N: 2}}, Hidden: []float32{1, 2, 3, 4}}
	f.Add(append([]byte{frameAct, 0, 0, 0, 0}, emb.marshal(nil)...), 2)
	spec := actMsg{Seq: 5, Groups: []actGroup{{Slot: 1, Decode: true, Sample: true, Start: 9, N: 3, Drafts: []int32{4, 5}}}, Hidden: make([]float32, 6)}
	f.Add(append([]byte{frameAct, 0, 0, 0, 0}, spec.marshal(nil)...), 2)
	ver := tokenMsg{Seq: 5, Samples: []Sampled{{Slot: 1, Tokens: []int32{4, 9}, Drafted: 2}}}
	f.Add(append([]byte{frameToken, 0, 0, 0, 0}, ver.marshal(nil)...), 2)
	ver.Samples[0].Logprobs = []*runnerapi.Logprobs{{TokenLogprob: runnerapi.TokenLogprob{Token: 4, Logprob: -1}}, {TokenLogprob: runnerapi.TokenLogprob{Token: 9, Logprob: -2},
		Top: []runnerapi.TokenLogprob{{Token: 9, Logprob: -2}}}}
	f.Add(append([]byte{frameToken, 0, 0, 0, 0}, ver.marshal(nil)...), 2)
	h, _ := json.Marshal(linkHello{Instance: "i", From: 0, To: 1})
	f.Add(append([]byte{frameHello, byte(len(h)), 0, 0, 0}, h...), 4)
	f.Add([]byte{frameAct, 0xff, 0xff, 0xff, 0xff}, 4)
	f.Fuzz(func(t *testing.T, data []byte, dim int) {
		if dim < 1 || dim > 1024 {
			return
		}
		// Fix up the length field of the first frame for the seeds.
		if len(data) >= 5 && data[1] == 0 && data[2] == 0 && data[3] == 0 && data[4] == 0 {
			n := len(data) - 5
			data[1], data[2], data[3], data[4] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
		}
		l := NewLink(memConn{r: bytes.NewReader(data)})
		for range 4 {
			typ, p, _, err := l.recvFrame()
			if err != nil {
				return
			}
			if len(p) > MaxFrame {
				t.Fatalf("frame of %d bytes passed the limit", len(p))
			}
			switch typ {
			case frameAct:
				var m actMsg
				if m.unmarshal(p, dim) == nil {
					if again := m.marshal(nil); !bytes.Equal(again, p) && !hasNaN(m.Hidden) {
						t.Fatalf("act round trip: %x → %x", p, again)
					}
					for _, g := range m.Groups {
						if len(g.Drafts) > runnerapi.MaxDraft || g.Drafts != nil && int(g.N) != len(g.Drafts)+1 {
							t.Fatalf("group of %d rows with %d drafts", g.N, len(g.Drafts))
						}
					}
				}
			case frameToken:
				var m tokenMsg
				if m.unmarshal(p) == nil {
					for _, s := range m.Samples {
						for _, lp := range s.Logprobs {
							if lp == nil || len(lp.Top) > runnerapi.MaxTopLogprobs {
								t.Fatalf("logprobs %+v: none, or top logprobs past the limit", lp)
							}
						}
						if s.Logprobs != nil && len(s.Logprobs) != len(s.Tokens) {
							t.Fatalf("%d logprobs for %d tokens", len(s.Logprobs), len(s.Tokens))
						}
						if s.Drafted > runnerapi.MaxDraft || len(s.Tokens) > s.Drafted+1 {
							t.Fatalf("tokens %v of %d drafts", s.Tokens, s.Drafted)
						}
						if s.Embedding == nil && len(s.Tokens) == 0 || len(s.Embedding) > maxEmbedDim || s.Embedding != nil && (s.Tokens != nil || s.Logprobs != nil) {
							t.Fatalf("an embedding of %d values with tokens %v (logprobs too: %v)", len(s.Embedding), s.Tokens, s.Logprobs != nil)
						}
					}
					if !bytes.Equal(m.marshal(nil), p) {
						t.Fatalf("token round trip: %x → %x", p, m.marshal(nil))
					}
				}
			case frameHello:
				var hh linkHello
				json.Unmarshal(p, &hh)
			}
		}
	})
}

func hasNaN(xs []float32) bool {
	return slices.ContainsFunc(xs, func(x float32) bool { return x != x })
}

// Rank 0 refuses a token frame whose sample does not answer its step's
// group: another slot, or drafts other than those it sent (the scheduler
// trims a slot's history by the drafts rejected).
func TestPipelineRefusesForeignSamples(t *testing.T) {
	var phase trace.Token // a request that is not traced
	group := Group{Slot: 1, Tokens: []int32{5, 6, 7}, Draft: 2, Sample: true, Decode: true, Parent: &phase}
	for _, c := range []struct {
		name string
		smp  Sampled
		ok   bool
	}{
		{"its own", Sampled{Slot: 1, Tokens: []int32{5, 6}, Drafted: 2}, true},
		{"another slot", Sampled{Slot: 0, Tokens: []int32{5, 6}, Drafted: 2}, false},
		{"more drafts", Sampled{Slot: 1, Tokens: []int32{5, 6, 7, 8}, Drafted: 3}, false},
		{"no drafts", Sampled{Slot: 1, Tokens: []int32{5}}, false},
	} {
		payload := (&tokenMsg{Seq: 1, Samples: []Sampled{c.smp}}).marshal(nil)
		p := &Pipeline{Shape: runnerapi.Shape{Pipeline: 2, Tensor: 1}, Out: NewLink(memConn{r: bytes.NewReader(nil)}),
			In: NewLink(memConn{r: bytes.NewReader(frame(frameToken, payload))})}
		p.pending = []pendingStep{{st: &Step{Groups: []Group{group}}, seq: 1}}
		_, got, err := p.Recv(context.Background())
		if c.ok && (err != nil || len(got) != 1) || !c.ok && !errors.Is(err, ErrLinkLost) {
			t.Errorf("%s: %v, %v", c.name, got, err)
		}
	}
}
