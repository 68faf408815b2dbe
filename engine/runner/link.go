package runner

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Rank links carry a pipeline between the ranks of one instance: hidden
// states down from rank r to r+1, the sampled token from the last rank back
// to rank 0. A link is a byte stream (through the agents' authenticated
// peer links between nodes) of frames: type (1 byte), payload length
// (uint32, little endian), payload.
const (
	frameHello      = runnerapi.AuthFrame // JSON linkHello: the first frame each way (the agent's hello on a rank port too)
	frameBegin byte = 2                   // JSON beginMsg: a request starts
	frameAct   byte = 3                   // binary actMsg: a step's hidden states
	frameToken byte = 4                   // binary tokenMsg: the step's sampled tokens
	frameEnd   byte = 5                   // JSON endMsg: a slot's request is over
	frameShift byte = 6                   // JSON shiftMsg: a slot's context shift
	frameBack  byte = 7                   // JSON rollbackMsg: a slot's rejected drafts dropped
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

// sampleLink records l's sent bytes as counter samples of rec: now, every
// LinkSampleEvery, and when stop is called. A nil rec or l records none.
func sampleLink(rec *trace.Recorder, l *Link, to int) (stop func()) {
	if rec == nil || l == nil {
		return func() {}
	}
	name := runnerapi.LinkCounter(to)
	return trace.Periodic(runnerapi.LinkSampleEvery, func() { s, _ := l.Bytes(); rec.Counter(name, "bytes", float64(s)) })
}

// sampleMesh records, like sampleLink, the bytes this rank has sent to
// each other rank of its tensor-parallel group (counter LinkCounter of
// that rank's number in the instance: first, the group's rank 0's, plus
// its place in the group). A nil rec or mesh records none.
func sampleMesh(rec *trace.Recorder, m *collective.Mesh, first int) (stop func()) {
	if rec == nil || m == nil {
		return func() {}
	}
	names := make([]string, m.Size())
	for g := range names {
		names[g] = runnerapi.LinkCounter(first + g)
	}
	return trace.Periodic(runnerapi.LinkSampleEvery, func() {
		for g, name := range names {
			if g != m.Rank() {
				rec.Counter(name, "bytes", float64(m.SentTo(g)))
			}
		}
	})
}
