package runner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
)

// The frames of a pipeline. A step carries rows of several slots (each a
// request, with its own KV cache sequence): the begin frame of a slot's
// request comes before its rows, and its end frame after them.

// beginMsg starts a request in a slot on every rank: the slot's cache kept
// up to Keep positions (a cached prompt prefix), the last rank's sampler
// seeded, spans recorded when TraceID is set.
type beginMsg struct {
	Req     uint64         `json:"req"`
	Slot    int            `json:"slot"`
	Keep    int            `json:"keep,omitempty"`
	Sample  sample.Options `json:"sample"`
	TraceID string         `json:"traceId,omitempty"`
	// Logprobs is 1 + how many top logprobs the last rank sends with
	// each token (0: no logprobs; 1: the sampled token's only).
	Logprobs int `json:"logprobs,omitempty"`
	// Grammar constrains the last rank's sampling.
	Grammar *grammar.Spec `json:"grammar,omitempty"`
	// Embed makes the request an embedding job: the last rank pools.
	Embed bool `json:"embed,omitempty"`
}

// endMsg ends a slot's request; ranks then hand over its spans. Forget
// also drops the slot's cache (to make room for other slots).
type endMsg struct {
	Req    uint64 `json:"req"`
	Slot   int    `json:"slot"`
	Forget bool   `json:"forget,omitempty"`
}

// shiftMsg shifts a slot's cache on every rank: positions [Keep,
// Keep+Discard) dropped, the later ones moved down.
type shiftMsg struct {
	Slot    int `json:"slot"`
	Keep    int `json:"keep"`
	Discard int `json:"discard"`
}

// rollbackMsg drops a slot's cache from Keep on, on every rank: the
// positions of drafts the last rank rejected.
type rollbackMsg struct {
	Slot int `json:"slot"`
	Keep int `json:"keep"`
}

// actGroup is one slot's rows of a step: N positions from Start.
type actGroup struct {
	Slot   int
	Decode bool   // decode phase (else prefill)
	Sample bool   // the last rank samples after the group's last row
	Embed  bool   // an embedding job's rows: the last rank pools them
	Token  uint32 // token index, for span args
	Start  uint32
	N      uint32
	// Drafts are a speculating decode group's drafted tokens (rows 1…N-1),
	// which the last rank verifies.
	Drafts []int32
}

// actMsg is one step's hidden states: the groups' rows in order.
type actMsg struct {
	Seq    uint32 // step number on the link (for flow ids)
	Groups []actGroup
	Hidden []float32
}

// Sizes of the binary frames.
const (
	actHeader  = 4 + 2
	actGroupSz = 2 + 1 + 4 + 4 + 4
	tokHeader  = 4 + 2
	tokSample  = 2 + 4 + 1
)

func (m *actMsg) rows() int {
	n := 0
	for _, g := range m.Groups {
		n += int(g.N)
	}
	return n
}

func (m *actMsg) marshal(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, m.Seq)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(m.Groups)))
	for _, g := range m.Groups {
		b = binary.LittleEndian.AppendUint16(b, uint16(g.Slot))
		b = append(b, boolByte(g.Decode)|boolByte(g.Sample)<<1|boolByte(g.Embed)<<2|boolByte(len(g.Drafts) > 0)<<3)
		b = binary.LittleEndian.AppendUint32(b, g.Token)
		b = binary.LittleEndian.AppendUint32(b, g.Start)
		b = binary.LittleEndian.AppendUint32(b, g.N)
	}
	for _, g := range m.Groups {
		if len(g.Drafts) > 0 {
			b = append(b, byte(len(g.Drafts)))
			for _, t := range g.Drafts {
				b = binary.LittleEndian.AppendUint32(b, uint32(t))
			}
		}
	}
	for _, v := range m.Hidden {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func (m *actMsg) unmarshal(b []byte, dim int) error {
	if len(b) < actHeader {
		return fmt.Errorf("act frame of %d bytes, want ≥ %d", len(b), actHeader)
	}
	m.Seq = binary.LittleEndian.Uint32(b)
	ng := int(binary.LittleEndian.Uint16(b[4:]))
	if ng == 0 || ng > backend.MaxParallel || len(b) < actHeader+ng*actGroupSz {
		return fmt.Errorf("act frame: %d groups in %d bytes (1..%d)", ng, len(b), backend.MaxParallel)
	}
	m.Groups = make([]actGroup, ng)
	var seen [backend.MaxParallel]bool
	rows := uint64(0)
	for i := range m.Groups {
		p := b[actHeader+i*actGroupSz:]
		g := actGroup{Slot: int(binary.LittleEndian.Uint16(p)), Token: binary.LittleEndian.Uint32(p[3:]),
			Start: binary.LittleEndian.Uint32(p[7:]), N: binary.LittleEndian.Uint32(p[11:])}
		if p[2] > 15 || p[2]&5 == 5 || p[2]&8 != 0 && p[2]&3 != 3 {
			return fmt.Errorf("act frame: flags %#x", p[2])
		}
		g.Decode, g.Sample, g.Embed = p[2]&1 != 0, p[2]&2 != 0, p[2]&4 != 0
		if p[2]&8 != 0 {
			g.Drafts = []int32{} // read after the groups
		}
		if g.Slot >= backend.MaxParallel || seen[g.Slot] || g.N == 0 {
			return fmt.Errorf("act frame: group %d is slot %d with %d rows (slots distinct, below %d; rows ≥ 1)", i, g.Slot, g.N, backend.MaxParallel)
		}
		seen[g.Slot] = true
		rows += uint64(g.N)
		m.Groups[i] = g
	}
	rest, err := readDrafts(m.Groups, b[actHeader+ng*actGroupSz:])
	if err != nil {
		return err
	}
	if uint64(len(rest)) != rows*uint64(dim)*4 {
		return fmt.Errorf("act frame: %d positions of dim %d in %d bytes", rows, dim, len(rest))
	}
	m.Hidden = make([]float32, len(rest)/4)
	for i := range m.Hidden {
		m.Hidden[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
	}
	return nil
}

// readDrafts reads the drafts of the groups that have them (a count byte,
// then the tokens) and returns the bytes after them.
func readDrafts(gs []actGroup, b []byte) ([]byte, error) {
	for i := range gs {
		g := &gs[i]
		if g.Drafts == nil {
			continue
		}
		if len(b) < 1 {
			return nil, errors.New("act frame: drafts cut short")
		}
		n := int(b[0])
		if n < 1 || n > runnerapi.MaxDraft || uint32(n+1) != g.N || len(b) < 1+4*n {
			return nil, fmt.Errorf("act frame: group %d drafts %d tokens for %d rows in %d bytes (1..%d, one row more)", i, n, g.N, len(b), runnerapi.MaxDraft)
		}
		g.Drafts = make([]int32, n)
		for j := range g.Drafts {
			g.Drafts[j] = int32(binary.LittleEndian.Uint32(b[1+4*j:]))
		}
		b = b[1+4*n:]
	}
	return b, nil
}

// tokenMsg is what the last rank sampled at the end of a step: a Sampled
// per sampling group.
type tokenMsg struct {
	Seq     uint32
	Samples []Sampled
}

// noLogprobs marks a sample without logprobs in a token frame;
// embedding marks an embedding job's vector instead.
const (
	noLogprobs = 0xff
	embedding  = 0xfe
	// verified marks a drafting group's tokens: the drafts' count (byte),
	// the tokens' count (byte, 1..drafts+1) and the tokens.
	verified = 0xfd
)

// readVerifiedLogprobs reads the logprobs after a verified group's tokens:
// noLogprobs, or 1 and one appendLogprobs per token.
func (s *Sampled) readVerifiedLogprobs(b []byte) ([]byte, error) {
	if len(b) < 1 || b[0] != noLogprobs && b[0] != 1 {
		return nil, errors.New("verified tokens: no logprobs flag")
	}
	if b[0] == noLogprobs {
		return b[1:], nil
	}
	b = b[1:]
	for _, t := range s.Tokens {
		if len(b) < 1 {
			return nil, errors.New("verified tokens: logprobs cut short")
		}
		lp, rest, err := readLogprobs(b[1:], b[0], t)
		if err != nil || lp == nil {
			return nil, fmt.Errorf("verified token %d: logprobs: %v", t, err)
		}
		s.Logprobs, b = append(s.Logprobs, lp), rest
	}
	return b, nil
}

// maxEmbedDim bounds an embedding's length in a token frame.
const maxEmbedDim = 1 << 16

// marshal writes Seq, the count, then per sample its slot (uint16), first
// token (int32; -1 for an embedding) and the number of top logprobs
// (byte; noLogprobs for none), followed when there are logprobs by the
// token's (float32) and the top (id int32, logprob float32) pairs. A
// sample with drafts (verified) or an embedding has its own form instead
// of the logprobs.
func (m *tokenMsg) marshal(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, m.Seq)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(m.Samples)))
	for _, s := range m.Samples {
		b = binary.LittleEndian.AppendUint16(b, uint16(s.Slot))
		tok, lp := int32(-1), (*runnerapi.Logprobs)(nil)
		if len(s.Tokens) > 0 {
			tok = s.Tokens[0]
		}
		if len(s.Logprobs) > 0 {
			lp = s.Logprobs[0]
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(tok))
		if s.Drafted > 0 {
			b = append(b, verified, byte(s.Drafted), byte(len(s.Tokens)))
			for _, t := range s.Tokens {
				b = binary.LittleEndian.AppendUint32(b, uint32(t))
			}
			if len(s.Logprobs) != len(s.Tokens) {
				b = append(b, noLogprobs)
				continue
			}
			b = append(b, 1)
			for _, lp := range s.Logprobs {
				b = appendLogprobs(b, lp)
			}
			continue
		}
		if s.Embedding != nil {
			b = append(b, embedding)
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s.Embedding)))
			for _, v := range s.Embedding {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
			continue
		}
		b = appendLogprobs(b, lp)
	}
	return b
}

// appendLogprobs writes lp (nil: none) as the number of top logprobs
// (byte; noLogprobs for none), the token's logprob (float32) and the top
// (id int32, logprob float32) pairs.
func appendLogprobs(b []byte, lp *runnerapi.Logprobs) []byte {
	if lp == nil {
		return append(b, noLogprobs)
	}
	b = append(b, byte(len(lp.Top)))
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(lp.Logprob))
	for _, t := range lp.Top {
		b = binary.LittleEndian.AppendUint32(b, uint32(t.Token))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(t.Logprob))
	}
	return b
}

// readLogprobs reads what appendLogprobs wrote (k: its first byte, read)
// for token tok; nil for none.
func readLogprobs(b []byte, k byte, tok int32) (*runnerapi.Logprobs, []byte, error) {
	if k == noLogprobs {
		return nil, b, nil
	}
	if k > runnerapi.MaxTopLogprobs || len(b) < 4+8*int(k) {
		return nil, nil, fmt.Errorf("%d top logprobs in %d bytes (at most %d)", k, len(b), runnerapi.MaxTopLogprobs)
	}
	lp := &runnerapi.Logprobs{TokenLogprob: runnerapi.TokenLogprob{Token: tok, Logprob: math.Float32frombits(binary.LittleEndian.Uint32(b))}}
	for j := range int(k) {
		p := b[4+8*j:]
		lp.Top = append(lp.Top, runnerapi.TokenLogprob{Token: int32(binary.LittleEndian.Uint32(p)), Logprob: math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))})
	}
	return lp, b[4+8*int(k):], nil
}

func (m *tokenMsg) unmarshal(b []byte) error {
	if len(b) < tokHeader {
		return fmt.Errorf("token frame of %d bytes, want ≥ %d", len(b), tokHeader)
	}
	m.Seq = binary.LittleEndian.Uint32(b)
	n := int(binary.LittleEndian.Uint16(b[4:]))
	if n == 0 || n > backend.MaxParallel {
		return fmt.Errorf("token frame: %d samples (1..%d)", n, backend.MaxParallel)
	}
	m.Samples = make([]Sampled, 0, n)
	b = b[tokHeader:]
	for i := range n {
		if len(b) < tokSample {
			return fmt.Errorf("token frame: sample %d cut short", i)
		}
		s := Sampled{Slot: int(binary.LittleEndian.Uint16(b))}
		tok, k := int32(binary.LittleEndian.Uint32(b[2:])), b[6]
		b = b[tokSample:]
		if k == verified {
			if len(b) < 2 || b[0] < 1 || b[0] > runnerapi.MaxDraft || b[1] < 1 || b[1] > b[0]+1 || len(b) < 2+4*int(b[1]) {
				return fmt.Errorf("token frame: sample %d: verified tokens cut short or out of range", i)
			}
			s.Drafted, s.Tokens = int(b[0]), make([]int32, b[1])
			for j := range s.Tokens {
				s.Tokens[j] = int32(binary.LittleEndian.Uint32(b[2+4*j:]))
			}
			if s.Tokens[0] != tok {
				return fmt.Errorf("token frame: sample %d: first verified token %d, token %d", i, s.Tokens[0], tok)
			}
			b = b[2+4*len(s.Tokens):]
			var err error
			if b, err = s.readVerifiedLogprobs(b); err != nil {
				return fmt.Errorf("token frame: sample %d: %w", i, err)
			}
		} else if k == embedding {
			if tok != -1 {
				return fmt.Errorf("token frame: sample %d: an embedding with token %d, want -1", i, tok)
			}
			var err error
			if s.Embedding, b, err = readEmbedding(b); err != nil {
				return fmt.Errorf("token frame: sample %d: %w", i, err)
			}
		} else {
			lp, rest, err := readLogprobs(b, k, tok)
			if err != nil {
				return fmt.Errorf("token frame: sample %d: %w", i, err)
			}
			if s.Tokens, b = []int32{tok}, rest; lp != nil {
				s.Logprobs = []*runnerapi.Logprobs{lp}
			}
		}
		m.Samples = append(m.Samples, s)
	}
	if len(b) != 0 {
		return fmt.Errorf("token frame: %d bytes after the samples", len(b))
	}
	return nil
}

// readEmbedding reads a token frame's vector: its length (uint32), then
// its values; it returns the bytes after it.
func readEmbedding(b []byte) ([]float32, []byte, error) {
	if len(b) < 4 {
		return nil, nil, errors.New("embedding cut short")
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n == 0 || n > maxEmbedDim || len(b) < 4*n {
		return nil, nil, fmt.Errorf("embedding of %d values in %d bytes (1..%d)", n, len(b), maxEmbedDim)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, b[4*n:], nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
