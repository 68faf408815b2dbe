package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// errQueueFull drops a link whose peer does not keep up: a slow reader
// must not stall the master.
var errQueueFull = errors.New("peer send queue full")

// conn is one authenticated peer link with a bounded send queue.
type conn struct {
	tc   *tls.Conn
	log  *slog.Logger
	peer string
	addr string // the address we dialled (outbound links only)
	// traffic counts this peer's bytes; set right after the handshake.
	traffic *traffic
	hello   wire.Hello

	queue chan frame
	// work runs a link's non-probe messages in order, off the read loop.
	work      chan func()
	closeOnce sync.Once
	done      chan struct{}
}

// frame is one encoded, queued message.
type frame struct {
	typ     wire.Type
	payload []byte
}

func newConn(tc *tls.Conn, log *slog.Logger) *conn {
	return &conn{tc: tc, log: log, queue: make(chan frame, sendQueueLen), done: make(chan struct{})}
}

// send queues a message; it never blocks.
func (c *conn) send(msg wire.Message) error {
	typ, b, err := wire.Encode(msg)
	if err != nil {
		return err
	}
	f := frame{typ: typ, payload: b}
	select {
	case <-c.done:
		return errors.New("peer link closed")
	case c.queue <- f:
		return nil
	default:
		c.log.Warn("dropping slow peer link", "peer", c.peer)
		c.close()
		return errQueueFull
	}
}

// writeNow writes a message synchronously (the handshake's Hello).
func (c *conn) writeNow(msg wire.Message) error {
	typ, b, err := wire.Encode(msg)
	if err != nil {
		return err
	}
	return wire.WriteFrame(c.tc, typ, b)
}

func (c *conn) writeLoop(ctx context.Context) {
	for {
		select {
		case <-c.done:
			return
		case <-ctx.Done():
			return
		case f := <-c.queue:
			c.tc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := wire.WriteFrame(c.tc, f.typ, f.payload); err != nil {
				c.close()
				return
			}
			if c.traffic != nil {
				c.traffic.sent.Add(uint64(5 + len(f.payload)))
			}
		}
	}
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		closeTLS(c.tc)
	})
}

// closeTLS closes a TLS link at once. tls.Conn.Close first sends a
// close_notify, and waits for the link's write lock and up to 5 s for that
// write: a peer that stopped reading (a one-way partition) held the caller,
// and the member sweep with it, for 5 s. Closing the socket first fails
// any pending write, so the alert fails at once too; Orrery's framing
// needs no close_notify.
func closeTLS(tc *tls.Conn) {
	if nc := tc.NetConn(); nc != nil {
		nc.Close()
	}
	tc.Close()
}
