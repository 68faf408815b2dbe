// Package collective sums vectors across the ranks of a tensor-parallel
// group over byte streams: one link to every other rank (a mesh), given by
// the caller (direct TCP on one machine, the agents' authenticated links
// between machines). Its Mesh is the backend's Collective.
//
// A message on a link is a frame: type (1 byte), sequence number (uint32),
// payload length (uint32, little endian), payload. All-reduce payloads are
// the sender's float32 values, little endian; control payloads are the
// group leader's (the runner's step broadcasts), read by Recv.
package collective

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Frame types.
const (
	frameReduce  byte = 1
	frameControl byte = 2
)

// MaxPayload bounds one frame: a 512-token prefill of 8192-dim hidden
// states is 16 MiB.
const MaxPayload = 64 << 20

const headerLen = 9

// DefaultReduceTimeout is Mesh.ReduceTimeout unless set: far more than
// the compute between two all-reduces (one block's half, even of a long
// prompt on a large model).
const DefaultReduceTimeout = 2 * time.Minute

// ErrLinkLost is wrapped when a link of the group breaks: a rank died or
// its node went away. The mesh is unusable after it.
var ErrLinkLost = errors.New("tensor-parallel link lost")

// Mesh is one rank's end of a group's links. AllReduce and Send/Recv may
// be called from one goroutine at a time each.
type Mesh struct {
	rank, n int
	links   []*link // by rank; nil for this one

	seq  uint32   // all-reduces so far
	recv [][]byte // per rank: the last values received
	// Per rank: enc the values sent, until the round sends them: over f32
	// a view of the sum's buffer, over a 16-bit wire enc16's storage.
	// enc16 and dec (the values received, decoded from a 16-bit wire) are
	// storage that is never a view: a sum over f32 (AllReduceExact) must
	// not leave a view where the next 16-bit sum would write.
	enc   [][]byte
	enc16 [][]byte
	dec   [][]float32
	out   []float32 // the sum, before it replaces the caller's buffer

	mu   sync.Mutex
	dead error

	// ReduceTimeout bounds how long an all-reduce waits for a rank: one
	// that stays silent longer (stopped, cut off without a reset) fails the
	// group instead of hanging it. Set before the first AllReduce.
	ReduceTimeout time.Duration

	// ScatterMin is the smallest all-reduce, in bytes, that a group of 3
	// or more sums by reduce-scatter then all-gather (0: DefaultScatterMin;
	// < 0: never). Every rank must use the same value. Set before the
	// first AllReduce.
	ScatterMin int

	// Wire is how the values travel (WireF32: as they are). Every rank
	// must use the same. Set before the first AllReduce.
	Wire Wire

	// Stats, for traces and benchmarks.
	Reduces    uint64
	BytesSent  uint64
	ReduceTime time.Duration
	// timings are the all-reduces since the last TakeTimings (at most
	// maxTimings: a caller that never takes them loses the oldest).
	timings []Timing
}

// Timing is one all-reduce: when it ran and the bytes it sent.
type Timing struct {
	Start, End time.Time
	Bytes      int
}

const maxTimings = 4096

// TakeTimings returns the all-reduces since the last call (a forward
// pass's, for its trace) and forgets them.
func (m *Mesh) TakeTimings() []Timing {
	t := m.timings
	m.timings = nil
	return t
}

type link struct {
	c    net.Conn
	br   *bufio.Reader
	wmu  sync.Mutex
	hdr  [headerLen]byte
	sent atomic.Uint64 // bytes written, frames' headers included
	recv atomic.Uint64 // bytes read, likewise
}

// New makes rank's end of an n-rank group from conns, indexed by rank
// (conns[rank] is nil). The caller has connected and authenticated them.
func New(rank, n int, conns []net.Conn) (*Mesh, error) {
	if n < 2 || rank < 0 || rank >= n || len(conns) != n {
		return nil, fmt.Errorf("mesh: rank %d of %d with %d links", rank, n, len(conns))
	}
	if !littleEndian() {
		return nil, errors.New("mesh: a big-endian machine; the wire is little endian")
	}
	m := &Mesh{rank: rank, n: n, links: make([]*link, n), recv: make([][]byte, n), dec: make([][]float32, n), enc: make([][]byte, n),
		enc16:         make([][]byte, n),
		ReduceTimeout: DefaultReduceTimeout}
	for r, c := range conns {
		if r == rank {
			continue
		}
		if c == nil {
			return nil, fmt.Errorf("mesh: no link to rank %d", r)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		m.links[r] = &link{c: c, br: bufio.NewReaderSize(c, 256<<10)}
	}
	return m, nil
}

// Rank and Size say where this end sits.
func (m *Mesh) Rank() int { return m.rank }
func (m *Mesh) Size() int { return m.n }

// Close closes every link; a blocked AllReduce or Recv returns.
func (m *Mesh) Close() {
	m.fail(net.ErrClosed)
	for _, l := range m.links {
		if l != nil {
			l.c.Close()
		}
	}
}

func (m *Mesh) fail(err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead == nil {
		m.dead = err
	}
	return m.dead
}

func (m *Mesh) err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead
}

// DefaultScatterMin is where a group of 3 or more switches to
// reduce-scatter then all-gather: a prefill's rows, not a decode step's
// (among 3 ranks on loopback: as fast at 64 KiB, twice as fast from 256).
const DefaultScatterMin = 128 << 10

// AllReduce replaces buf with the sum of every rank's buf, added in rank
// order (so every rank gets the same bits). Small vectors go by a direct
// exchange: each rank sends its values to every other and adds what it
// receives, one round, the least latency for a decode step's few
// kilobytes. From ScatterMin bytes in a group of 3 or more, by
// reduce-scatter then all-gather: rank r sums the r-th of n chunks (in
// rank order too, so the bits are the same) and sends it back to all,
// two rounds in which a rank sends 2(n-1)/n of the vector instead of
// n-1 times it.
func (m *Mesh) AllReduce(buf []float32) error { return m.allReduce(buf, m.Wire) }

// AllReduceExact is AllReduce with the values sent as they are, whatever
// the mesh's Wire: for sums that rounding would only spoil, such as a
// split head's logits gathered (each rank's rows among zeros). Every rank
// must call it for the same sum.
func (m *Mesh) AllReduceExact(buf []float32) error { return m.allReduce(buf, WireF32) }

func (m *Mesh) allReduce(buf []float32, w Wire) error {
	if err := m.err(); err != nil {
		return fmt.Errorf("%w: %w", ErrLinkLost, err)
	}
	start := time.Now()
	deadline := start.Add(m.ReduceTimeout)
	for _, l := range m.links {
		if l != nil {
			l.c.SetDeadline(deadline)
		}
	}
	size := len(buf) * w.size()
	if size > MaxPayload {
		return fmt.Errorf("all-reduce of %d bytes, at most %d", size, MaxPayload)
	}
	// Every rank adds the values the others receive: its own rounded to
	// the wire's type too.
	w.round(buf)
	scatterMin := cmp.Or(m.ScatterMin, DefaultScatterMin)
	var sent int
	var rerr error
	if m.n > 2 && scatterMin > 0 && size >= scatterMin {
		sent, rerr = m.scatterGather(buf, w)
	} else {
		sent, rerr = m.exchange(buf, w)
	}
	if rerr != nil {
		err := m.fail(rerr) // before Close, whose own error says less
		m.Close()
		return fmt.Errorf("%w: %w", ErrLinkLost, err)
	}
	m.Reduces++
	m.BytesSent += uint64(sent)
	end := time.Now()
	m.ReduceTime += end.Sub(start)
	if len(m.timings) == maxTimings {
		m.timings = m.timings[:copy(m.timings, m.timings[1:])]
	}
	m.timings = append(m.timings, Timing{Start: start, End: end, Bytes: sent})
	return nil
}

// exchange is the direct all-reduce: buf to every rank, every rank's buf
// added in rank order. It returns the bytes sent.
func (m *Mesh) exchange(buf []float32, w Wire) (int, error) {
	m.seq++
	payload := m.encode(m.rank, buf, w)
	if err := m.round(func(r int) []byte { return payload }, func(r int) int { return len(payload) }); err != nil {
		return 0, err
	}
	out := m.sum(len(buf), m.values(buf, w))
	copy(buf, out)
	return len(payload) * (m.n - 1), nil
}

// scatterGather is the all-reduce by reduce-scatter then all-gather.
func (m *Mesh) scatterGather(buf []float32, w Wire) (int, error) {
	part := func(r int) []float32 { return buf[r*len(buf)/m.n : (r+1)*len(buf)/m.n] }
	// Reduce-scatter: chunk r to rank r; this rank's chunk from every rank.
	m.seq++
	mine := part(m.rank)
	for r := range m.n {
		if r != m.rank {
			m.encode(r, part(r), w)
		}
	}
	if err := m.round(func(r int) []byte { return m.encode(r, nil, w) }, func(r int) int { return len(mine) * w.size() }); err != nil {
		return 0, err
	}
	out := m.sum(len(mine), m.values(mine, w))
	copy(mine, out)
	// All-gather: the summed chunk (rounded again, here as there) to
	// every rank; theirs into buf.
	m.seq++
	w.round(mine)
	payload := m.encode(m.rank, mine, w)
	if err := m.round(func(r int) []byte { return payload }, func(r int) int { return len(part(r)) * w.size() }); err != nil {
		return 0, err
	}
	sent := 0
	for r := range m.n {
		if r != m.rank {
			copy(part(r), m.decode(r, w))
			sent += (len(part(r)) + len(mine)) * w.size()
		}
	}
	return sent, nil
}

// encode returns the bytes of v to send, kept as slot r's until the round
// sends them (given again when v is nil): under WireF32 a view of v, else
// the slot's 16-bit storage, reused.
func (m *Mesh) encode(r int, v []float32, w Wire) []byte {
	switch {
	case v == nil:
	case w == WireF32:
		m.enc[r] = floatBytes(v)
	default:
		m.enc16[r] = w.encode(m.enc16[r], v)
		m.enc[r] = m.enc16[r]
	}
	return m.enc[r]
}

// decode returns what rank r sent (m.recv[r]) as values: under WireF32 a
// view, else decoded into r's storage.
func (m *Mesh) decode(r int, w Wire) []float32 {
	if w == WireF32 {
		return bytesFloats(m.recv[r])
	}
	m.dec[r] = w.decode(m.dec[r], m.recv[r])
	return m.dec[r]
}

// values gives rank r's part of a sum: this rank's own, or what r sent,
// decoded.
func (m *Mesh) values(own []float32, w Wire) func(r int) []float32 {
	return func(r int) []float32 {
		if r == m.rank {
			return own
		}
		return m.decode(r, w)
	}
}

// round sends send(r) to every other rank r and reads want(r) bytes from
// each into m.recv[r], under sequence m.seq. Writes go out first when they
// fit the sockets' buffers; larger ones beside the reads, so that two
// ranks writing to each other never both wait for a reader.
func (m *Mesh) round(send func(r int) []byte, want func(r int) int) error {
	var wg sync.WaitGroup
	errs := make([]error, m.n)
	write := func() {
		for r, l := range m.links {
			if l != nil {
				errs[r] = l.write(frameReduce, m.seq, send(r))
			}
		}
	}
	total := 0
	for r, l := range m.links {
		if l != nil {
			total = max(total, len(send(r)))
		}
	}
	if total <= 64<<10 {
		write()
	} else {
		wg.Go(write)
	}
	var rerr error
	for r, l := range m.links {
		if l == nil {
			continue
		}
		b, err := l.read(frameReduce, m.seq, want(r), m.recv[r])
		if err != nil {
			rerr = fmt.Errorf("from rank %d: %w", r, err)
			break
		}
		m.recv[r] = b
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil && rerr == nil {
			rerr = fmt.Errorf("to rank %d: %w", r, err)
		}
	}
	return rerr
}

// sum adds the n ranks' vectors of size values in rank order, into m.out.
func (m *Mesh) sum(size int, of func(r int) []float32) []float32 {
	if cap(m.out) < size {
		m.out = make([]float32, size)
	}
	out := m.out[:size]
	for r := range m.n {
		if r == 0 {
			copy(out, of(r))
			continue
		}
		for i, x := range of(r) {
			out[i] += x
		}
	}
	return out
}

// Send sends a control payload to every other rank (the leader's step).
func (m *Mesh) Send(payload []byte) error {
	if err := m.err(); err != nil {
		return fmt.Errorf("%w: %w", ErrLinkLost, err)
	}
	if len(payload) > MaxPayload {
		return fmt.Errorf("control message of %d bytes, at most %d", len(payload), MaxPayload)
	}
	for r, l := range m.links {
		if l == nil {
			continue
		}
		l.c.SetWriteDeadline(time.Now().Add(m.ReduceTimeout))
		if err := l.write(frameControl, 0, payload); err != nil {
			err = m.fail(fmt.Errorf("to rank %d: %w", r, err))
			m.Close()
			return fmt.Errorf("%w: %w", ErrLinkLost, err)
		}
	}
	return nil
}

// Recv reads the next control payload from rank from (the leader).
func (m *Mesh) Recv(from int) ([]byte, error) {
	if from < 0 || from >= m.n || m.links[from] == nil {
		return nil, fmt.Errorf("mesh: no link to rank %d", from)
	}
	// A follower waits here between requests, as long as they are apart:
	// no deadline (the last all-reduce's would cut it); the leader's link
	// closing ends the wait.
	m.links[from].c.SetReadDeadline(time.Time{})
	b, err := m.links[from].read(frameControl, 0, -1, nil)
	if err != nil {
		err = m.fail(fmt.Errorf("from rank %d: %w", from, err))
		m.Close()
		return nil, fmt.Errorf("%w: %w", ErrLinkLost, err)
	}
	return b, nil
}

func (l *link) write(typ byte, seq uint32, payload []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.hdr[0] = typ
	binary.LittleEndian.PutUint32(l.hdr[1:], seq)
	binary.LittleEndian.PutUint32(l.hdr[5:], uint32(len(payload)))
	// One write when small: a second segment would cost a wakeup.
	if len(payload) <= 16<<10 {
		var b [headerLen + 16<<10]byte
		n := copy(b[:], l.hdr[:])
		n += copy(b[n:], payload)
		w, err := l.c.Write(b[:n])
		l.sent.Add(uint64(w))
		return err
	}
	bufs := net.Buffers{l.hdr[:], payload}
	w, err := bufs.WriteTo(l.c)
	l.sent.Add(uint64(w))
	return err
}

// LinkStats is one link's traffic so far, frames' headers included.
// Direct: it runs between the ranks' processes (MarkDirect), not through
// the agents, which therefore do not count its bytes.
type LinkStats struct {
	Rank   int    `json:"rank"`
	Direct bool   `json:"direct,omitempty"`
	Sent   uint64 `json:"sent"`
	Recv   uint64 `json:"recv"`
}

// Links is every link's traffic so far, by the other end's rank.
func (m *Mesh) Links() []LinkStats {
	var out []LinkStats
	for r, l := range m.links {
		if l != nil {
			_, direct := l.c.(directConn)
			out = append(out, LinkStats{Rank: r, Direct: direct, Sent: l.sent.Load(), Recv: l.recv.Load()})
		}
	}
	return out
}

// MarkDirect marks c, before New or Connect takes it, as a direct link:
// one between the ranks' processes that no agent relays.
func MarkDirect(c net.Conn) net.Conn { return directConn{c} }

type directConn struct{ net.Conn }

// SentTo is the bytes this rank has written to rank r's link so far
// (frames' headers and control messages included): a link's traffic,
// safe to read while the mesh runs.
func (m *Mesh) SentTo(r int) uint64 {
	if r < 0 || r >= m.n || m.links[r] == nil {
		return 0
	}
	return m.links[r].sent.Load()
}

// read reads a frame of type typ (and, for an all-reduce, sequence seq and
// want bytes; want < 0: any length) into buf's storage when it fits.
func (l *link) read(typ byte, seq uint32, want int, buf []byte) ([]byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(l.br, hdr[:]); err != nil {
		return nil, err
	}
	l.recv.Add(headerLen)
	gotSeq, n := binary.LittleEndian.Uint32(hdr[1:]), binary.LittleEndian.Uint32(hdr[5:])
	switch {
	case hdr[0] != typ:
		return nil, fmt.Errorf("frame of type %d, want %d: the ranks are out of step", hdr[0], typ)
	case n > MaxPayload:
		return nil, fmt.Errorf("frame of %d bytes, at most %d", n, MaxPayload)
	case typ == frameReduce && (gotSeq != seq || int(n) != want):
		return nil, fmt.Errorf("all-reduce %d of %d bytes, want %d of %d: the ranks are out of step", gotSeq, n, seq, want)
	}
	if cap(buf) >= int(n) {
		buf = buf[:n]
		if _, err := io.ReadFull(l.br, buf); err != nil {
			return nil, err
		}
		l.recv.Add(uint64(n))
		return buf, nil
	}
	b, err := readGrowing(l.br, int(n))
	l.recv.Add(uint64(len(b)))
	return b, err
}

// readGrowing reads n bytes into storage that grows with what arrives
// (doubling from 64 KiB), so a header that claims MaxPayload from a peer
// that then sends nothing costs no 64 MiB allocation.
func readGrowing(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, 64<<10))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf[:cap(buf)], make([]byte, min(n-len(buf), cap(buf)))...)[:len(buf)]
		}
		m, err := io.ReadFull(r, buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// floatBytes and bytesFloats view float32s as their little-endian bytes
// and back, without copying (New checks the machine is little endian).
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
}

func bytesFloats(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
