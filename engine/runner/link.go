package runner

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-cluster/orrery/engine/sample"
)

// Rank links carry a pipeline between the ranks of one instance: hidden
// states down from rank r to r+1, the sampled token from the last rank back
// to rank 0. A link is a byte stream (through the agents' authenticated
// peer links between nodes) of frames: type (1 byte), payload length
// (uint32, little endian), payload.
const (
	frameHello byte = 1 // JSON linkHello: the first frame each way
	frameBegin byte = 2 // JSON beginMsg: a request starts
	frameAct   byte = 3 // binary actMsg: a batch of hidden states
	frameToken byte = 4 // binary tokenMsg: the sampled token
	frameEnd   byte = 5 // JSON endMsg: the request is over
)

// MaxFrame bounds one frame: a 512-token batch of 8192-dim hidden states
// is 16 MiB.
const MaxFrame = 64 << 20

// ErrLinkLost is wrapped when a rank link breaks: a rank died or its node
// went away. The pipeline is dead after it.
var ErrLinkLost = errors.New("rank link lost")

// linkHello opens a link: who is at each end.
type linkHello struct {
	Instance string `json:"instance"`
	From     int    `json:"from"`
	To       int    `json:"to"`
	// Token authenticates a connection to a runner's rank port (the
	// agent presents the token of the runner it connects to).
	Token string `json:"token,omitempty"`
}

// beginMsg starts a request on every rank: caches reset, the last rank's
// sampler seeded, spans recorded when TraceID is set.
type beginMsg struct {
	Req     uint64         `json:"req"`
	Sample  sample.Options `json:"sample"`
	TraceID string         `json:"traceId,omitempty"`
	// Logprobs is 1 + how many top logprobs the last rank sends with
	// each token (0: no logprobs; 1: the sampled token's only).
	Logprobs int `json:"logprobs,omitempty"`
}

// endMsg ends a request; ranks then hand over their spans.
type endMsg struct {
	Req uint64 `json:"req"`
}

// actMsg is one batch of hidden states at positions Start…Start+N-1.
type actMsg struct {
	Req    uint64
	Seq    uint32 // message number within the request (for flow ids)
	Decode bool   // decode phase (else prefill)
	Sample bool   // the last rank samples after this batch
	Token  uint32 // token index, for span args
	Start  uint32
	N      uint32
	Hidden []float32
}

// tokenMsg is the token the last rank sampled, with its logprobs when the
// request asked for them: then the 16-byte frame grows by the token's
// logprob (float32), a count n (uint32) and n (id int32, logprob float32)
// pairs.
type tokenMsg struct {
	Req      uint64
	Seq      uint32
	Token    int32
	Logprobs *Logprobs // nil: none
}

const tokenHeader = 16

const actHeader = 8 + 4 + 1 + 1 + 4 + 4 + 4

func (m *actMsg) marshal(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, m.Req)
	b = binary.LittleEndian.AppendUint32(b, m.Seq)
	b = append(b, boolByte(m.Decode), boolByte(m.Sample))
	b = binary.LittleEndian.AppendUint32(b, m.Token)
	b = binary.LittleEndian.AppendUint32(b, m.Start)
	b = binary.LittleEndian.AppendUint32(b, m.N)
	for _, v := range m.Hidden {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func (m *actMsg) unmarshal(b []byte, dim int) error {
	if len(b) < actHeader {
		return fmt.Errorf("act frame of %d bytes, want ≥ %d", len(b), actHeader)
	}
	m.Req = binary.LittleEndian.Uint64(b)
	m.Seq = binary.LittleEndian.Uint32(b[8:])
	if b[12] > 1 || b[13] > 1 {
		return fmt.Errorf("act frame: flag bytes %d, %d: want 0 or 1", b[12], b[13])
	}
	m.Decode, m.Sample = b[12] == 1, b[13] == 1
	m.Token = binary.LittleEndian.Uint32(b[14:])
	m.Start = binary.LittleEndian.Uint32(b[18:])
	m.N = binary.LittleEndian.Uint32(b[22:])
	rest := b[actHeader:]
	if m.N == 0 || uint64(len(rest)) != uint64(m.N)*uint64(dim)*4 {
		return fmt.Errorf("act frame: %d positions of dim %d in %d bytes", m.N, dim, len(rest))
	}
	m.Hidden = make([]float32, len(rest)/4)
	for i := range m.Hidden {
		m.Hidden[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
	}
	return nil
}

func (m *tokenMsg) marshal(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, m.Req)
	b = binary.LittleEndian.AppendUint32(b, m.Seq)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Token))
	if lp := m.Logprobs; lp != nil {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(lp.Logprob))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(lp.Top)))
		for _, t := range lp.Top {
			b = binary.LittleEndian.AppendUint32(b, uint32(t.Token))
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(t.Logprob))
		}
	}
	return b
}

func (m *tokenMsg) unmarshal(b []byte) error {
	if len(b) < tokenHeader {
		return fmt.Errorf("token frame of %d bytes, want ≥ %d", len(b), tokenHeader)
	}
	m.Req = binary.LittleEndian.Uint64(b)
	m.Seq = binary.LittleEndian.Uint32(b[8:])
	m.Token = int32(binary.LittleEndian.Uint32(b[12:]))
	m.Logprobs = nil
	rest := b[tokenHeader:]
	if len(rest) == 0 {
		return nil
	}
	if len(rest) < 8 {
		return fmt.Errorf("token frame of %d bytes: a logprobs tail of %d bytes", len(b), len(rest))
	}
	n := binary.LittleEndian.Uint32(rest[4:])
	if n > MaxTopLogprobs || uint64(len(rest)) != 8+8*uint64(n) {
		return fmt.Errorf("token frame: %d top logprobs in %d bytes (at most %d)", n, len(rest), MaxTopLogprobs)
	}
	lp := &Logprobs{TokenLogprob: TokenLogprob{Token: m.Token, Logprob: math.Float32frombits(binary.LittleEndian.Uint32(rest))}}
	for i := range int(n) {
		p := rest[8+8*i:]
		lp.Top = append(lp.Top, TokenLogprob{Token: int32(binary.LittleEndian.Uint32(p)), Logprob: math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))})
	}
	m.Logprobs = lp
	return nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// Link is one end of a rank link. Send and Recv may be used from two
// goroutines (one each); Close unblocks both.
type Link struct {
	c  net.Conn
	br *bufio.Reader

	wmu  sync.Mutex // serialises frames
	wbuf []byte

	sent, recv atomic.Uint64 // frame bytes

	closeOnce sync.Once
}

// NewLink wraps a connected stream.
func NewLink(c net.Conn) *Link {
	return &Link{c: c, br: bufio.NewReaderSize(c, 256<<10)}
}

// Close closes the stream.
func (l *Link) Close() error {
	var err error
	l.closeOnce.Do(func() { err = l.c.Close() })
	return err
}

// send writes one frame; payload is built by fill into a reused buffer.
func (l *Link) send(typ byte, fill func([]byte) []byte) (int, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	b := append(l.wbuf[:0], typ, 0, 0, 0, 0)
	b = fill(b)
	n := len(b) - 5
	if n > MaxFrame {
		return 0, fmt.Errorf("frame of %d bytes, limit %d", n, MaxFrame)
	}
	binary.LittleEndian.PutUint32(b[1:5], uint32(n))
	l.wbuf = b
	if _, err := l.c.Write(b); err != nil {
		return 0, fmt.Errorf("%w: send: %v", ErrLinkLost, err)
	}
	l.sent.Add(uint64(len(b)))
	return len(b), nil
}

func (l *Link) sendJSON(typ byte, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = l.send(typ, func(b []byte) []byte { return append(b, j...) })
	return err
}

// recvFrame reads one frame, returning when its first byte arrived too
// (for recv spans that exclude idle waiting).
func (l *Link) recvFrame() (typ byte, payload []byte, first time.Time, err error) {
	var h [5]byte
	if _, err := io.ReadFull(l.br, h[:1]); err != nil {
		return 0, nil, first, fmt.Errorf("%w: recv: %v", ErrLinkLost, err)
	}
	first = time.Now()
	if _, err := io.ReadFull(l.br, h[1:]); err != nil {
		return 0, nil, first, fmt.Errorf("%w: recv: %v", ErrLinkLost, err)
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, first, fmt.Errorf("frame of %d bytes, limit %d", n, MaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(l.br, payload); err != nil {
		return 0, nil, first, fmt.Errorf("%w: recv: %v", ErrLinkLost, err)
	}
	l.recv.Add(uint64(5 + n))
	return h[0], payload, first, nil
}

// Bytes is what crossed the link so far (frames, both ways).
func (l *Link) Bytes() (sent, recv uint64) {
	return l.sent.Load(), l.recv.Load()
}

// handshake sends our hello and checks the peer's.
func (l *Link) handshake(me linkHello, want func(linkHello) error) error {
	l.c.SetDeadline(time.Now().Add(10 * time.Second))
	defer l.c.SetDeadline(time.Time{})
	if err := l.sendJSON(frameHello, me); err != nil {
		return err
	}
	typ, p, _, err := l.recvFrame()
	if err != nil {
		return err
	}
	if typ != frameHello {
		return fmt.Errorf("rank link: first frame is type %d, want hello", typ)
	}
	var h linkHello
	if err := json.Unmarshal(p, &h); err != nil {
		return fmt.Errorf("rank link hello: %w", err)
	}
	return want(h)
}

// SendAuth is what the agent sends first on a connection to a runner's
// rank port: a hello carrying that runner's token.
func SendAuth(c net.Conn, token string) error {
	l := NewLink(c)
	return l.sendJSON(frameHello, linkHello{Token: token})
}
