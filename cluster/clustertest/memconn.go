package clustertest

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// addr is an in-memory address, "host:port".
type addr string

func (a addr) Network() string { return "mem" }
func (a addr) String() string  { return string(a) }

// buffer is one direction of a connection: what the writer wrote and the
// reader has not read yet. Writes never block (the buffer grows), so two
// ends may both write before reading, as the node's handshake does.
type buffer struct {
	mu     sync.Mutex
	data   []byte
	eof    bool          // the writer closed: reads drain data, then io.EOF
	gone   bool          // the reader closed: writes fail
	signal chan struct{} // closed and replaced whenever data or eof changes
}

func newBuffer() *buffer { return &buffer{signal: make(chan struct{})} }

func (b *buffer) notifyLocked() {
	close(b.signal)
	b.signal = make(chan struct{})
}

// deadline is a settable point in time and a channel closed when it passes.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	done  chan struct{}
}

func newDeadline() *deadline { return &deadline{done: make(chan struct{})} }

// set arms the deadline at t (zero: none), as net.Pipe does: a channel
// that has closed is replaced, one still open is kept, so that a reader
// blocked on it sees a deadline moved later.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.done // the timer fired: wait for it to close done
	}
	d.timer = nil
	closed := false
	select {
	case <-d.done:
		closed = true
	default:
	}
	if closed && (t.IsZero() || time.Until(t) > 0) {
		d.done = make(chan struct{})
	}
	switch dur := time.Until(t); {
	case t.IsZero():
	case dur > 0:
		done := d.done
		d.timer = time.AfterFunc(dur, func() { close(done) })
	case !closed:
		close(d.done)
	}
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}

// conn is one end of an in-memory connection. Safe for concurrent use,
// like a net.Conn.
type conn struct {
	nw            *Network // nil: never severed
	local, remote addr
	in, out       *buffer
	rd, wd        *deadline
	closeOnce     sync.Once
	closed        chan struct{}
}

var _ net.Conn = (*conn)(nil)

// pipe returns the two ends of a new connection.
func pipe(nw *Network, a, b addr) (*conn, *conn) {
	ab, ba := newBuffer(), newBuffer()
	return &conn{nw: nw, local: a, remote: b, in: ba, out: ab, rd: newDeadline(), wd: newDeadline(), closed: make(chan struct{})},
		&conn{nw: nw, local: b, remote: a, in: ab, out: ba, rd: newDeadline(), wd: newDeadline(), closed: make(chan struct{})}
}

func (c *conn) Read(p []byte) (int, error) {
	for {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.rd.wait():
			return 0, os.ErrDeadlineExceeded
		default:
		}
		b := c.in
		b.mu.Lock()
		if len(b.data) > 0 {
			n := copy(p, b.data)
			b.data = b.data[n:]
			b.mu.Unlock()
			return n, nil
		}
		if b.eof {
			b.mu.Unlock()
			return 0, io.EOF
		}
		sig := b.signal
		b.mu.Unlock()
		select {
		case <-sig:
		case <-c.closed:
		case <-c.rd.wait():
		}
	}
}

func (c *conn) Write(p []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	case <-c.wd.wait():
		return 0, os.ErrDeadlineExceeded
	default:
	}
	if c.nw != nil && c.nw.severed(c.local, c.remote) {
		return len(p), nil // dropped on the way
	}
	b := c.out
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone {
		return 0, io.ErrClosedPipe
	}
	b.data = append(b.data, p...)
	b.notifyLocked()
	return len(p), nil
}

// Close ends both directions: the peer reads what was written, then EOF,
// and its writes fail.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.out.mu.Lock()
		c.out.eof = true
		c.out.notifyLocked()
		c.out.mu.Unlock()
		c.in.mu.Lock()
		c.in.gone, c.in.data = true, nil
		c.in.mu.Unlock()
	})
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wd.set(t)
	return nil
}
func (c *conn) SetReadDeadline(t time.Time) error  { c.rd.set(t); return nil }
func (c *conn) SetWriteDeadline(t time.Time) error { c.wd.set(t); return nil }
