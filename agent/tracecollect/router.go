package tracecollect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Trace shipping: every rank sends its spans to the master's Collector. A
// Router carries them: over a trace stream (Purpose) to the master, or
// straight to the local Collector when this node is the master. A node
// keeps one stream to the master and shares it among its ranks; the
// stream's own flow control paces a large trace, so it never delays the
// control link's heartbeats.

// Purpose is the stream purpose of trace shipping.
const Purpose cluster.Purpose = "trace"

// Limits.
const (
	// maxFrame bounds a frame on a trace stream: a chunk's data, or a
	// task's ranks (MaxTraceRanks of them), plus the JSON around them.
	maxFrame = wire.MaxTraceChunk + 256<<10
	// idleClose closes a stream to the master that has not been used for
	// this long, so that nodes do not hold idle streams.
	idleClose = 30 * time.Second
)

// Node is what a Router needs of cluster.Node.
type Node interface {
	ID() string
	Master() string
	DialStream(ctx context.Context, peer string, p cluster.Purpose, id string) (net.Conn, error)
	HandleStream(p cluster.Purpose, h cluster.StreamHandler)
}

var _ Node = (*cluster.Node)(nil)

// Router routes this node's trace messages to the master, and takes other
// nodes' messages into the local collector while this node is the master.
//
// A master can change while a task's trace is being merged (it stalled,
// crashed or was cut off): the Router keeps what it sent for Retain, and
// sends it again to the new master, whose merge then yields the trace, or
// a partial one. Safe for concurrent use.
type Router struct {
	node   Node
	local  *Collector
	log    *slog.Logger
	retain time.Duration

	mu         sync.Mutex // guards the fields below; held while writing
	peer       string     // the master conn goes to
	conn       net.Conn   // nil: none open
	idle       *time.Timer
	closed     bool
	lastMaster string    // the master of the last send
	kept       []keptMsg // sent within retain, oldest first
	keptBytes  int
}

// keptMsg is a message sent to master at time at.
type keptMsg struct {
	at     time.Time
	master string
	msg    wire.Message
	size   int
}

// maxKept bounds the bytes a Router keeps for resending.
const maxKept = 32 << 20

// NewRouter returns a router for node, delivering to local (this node's
// collector), and registers its stream handler with node. It keeps what
// it sends for retain (the master's merge timeout and a margin).
func NewRouter(node Node, local *Collector, retain time.Duration, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Router{node: node, local: local, retain: retain, log: log.With("component", "tracecollect")}
	node.HandleStream(Purpose, r.serve)
	return r
}

// Task announces a traced task to the master. It returns the master's id.
func (r *Router) Task(ctx context.Context, m *wire.TraceTask) (string, error) {
	if err := m.Validate(); err != nil {
		return "", fmt.Errorf("ship trace: %w", err)
	}
	return r.send(ctx, m, 256+len(m.Ranks)*64)
}

// Chunk sends a chunk of a rank's spans to the master. It returns the
// master's id.
func (r *Router) Chunk(ctx context.Context, m *wire.TraceChunk) (string, error) {
	if err := m.Validate(); err != nil {
		return "", fmt.Errorf("ship trace: %w", err)
	}
	return r.send(ctx, m, 256+len(m.Data))
}

// send delivers msg to the master (first sending again what earlier
// masters may have lost, if the master changed) and keeps it for resends.
// It blocks while the master reads slowly, until ctx ends.
func (r *Router) send(ctx context.Context, msg wire.Message, size int) (string, error) {
	master := r.node.Master()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return master, errors.New("ship trace: router closed")
	}
	r.resendLocked(ctx, master)
	err := r.deliverLocked(ctx, master, msg)
	r.keepLocked(keptMsg{at: time.Now(), master: master, msg: msg, size: size})
	return master, err
}

// Resend sends again, to the master of now, what was sent to another one
// within retain. The node calls it when the master changes.
func (r *Router) Resend(ctx context.Context) {
	master := r.node.Master()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.resendLocked(ctx, master)
	}
}

func (r *Router) resendLocked(ctx context.Context, master string) {
	if master == r.lastMaster {
		return
	}
	r.lastMaster = master
	cut := time.Now().Add(-r.retain)
	n := 0
	for i := range r.kept {
		k := &r.kept[i]
		if k.master == master || k.at.Before(cut) {
			continue
		}
		if err := r.deliverLocked(ctx, master, k.msg); err != nil {
			r.log.Debug("resend trace to the new master", "master", master, "err", err)
		}
		k.master = master
		n++
	}
	if n > 0 {
		r.log.Info("trace data sent again to the new master", "master", master, "messages", n)
	}
}

// keepLocked keeps a sent message for resends, dropping what is older than
// retain or over maxKept.
func (r *Router) keepLocked(k keptMsg) {
	cut := time.Now().Add(-r.retain)
	i := 0
	for i < len(r.kept) && (r.kept[i].at.Before(cut) || r.keptBytes+k.size > maxKept) {
		r.keptBytes -= r.kept[i].size
		i++
	}
	r.kept = append(r.kept[i:], k)
	r.keptBytes += k.size
}

// deliverLocked hands msg to the local collector when this node is the
// master, else writes it on the stream to the master, opening one if
// needed.
func (r *Router) deliverLocked(ctx context.Context, master string, msg wire.Message) error {
	if self := r.node.ID(); master == self {
		switch m := msg.(type) {
		case *wire.TraceTask:
			return r.local.Task(self, m)
		case *wire.TraceChunk:
			return r.local.Chunk(self, m)
		}
		return fmt.Errorf("ship trace: %T", msg)
	}
	typ, b, err := wire.Encode(msg)
	if err != nil {
		return err
	}
	if r.conn != nil && r.peer != master {
		r.dropLocked()
	}
	if r.conn == nil {
		c, err := r.node.DialStream(ctx, master, Purpose, "")
		if err != nil {
			return fmt.Errorf("ship trace to master %s: %w", master, err)
		}
		r.conn, r.peer = c, master
		r.idle = time.AfterFunc(idleClose, r.closeIdle)
	}
	r.idle.Reset(idleClose)
	c := r.conn
	err = wire.WriteFrame(&progressWriter{ctx: ctx, c: c}, typ, b)
	c.SetWriteDeadline(time.Time{})
	if err != nil {
		r.dropLocked() // a failed or timed-out write leaves the stream unusable
		return fmt.Errorf("ship trace to master %s: %w", master, err)
	}
	return nil
}

// writeStall is how long a write to the master may make no progress at
// all before the stream is given up. A slow master (a busy CPU, a merge in
// progress) only slows the writes: a large chunk going out at a few MB/s
// is progress.
const writeStall = 30 * time.Second

// writePiece is how much progressWriter writes under one deadline.
const writePiece = 64 << 10

// progressWriter writes to c in pieces, each of which must go out within
// writeStall, so that a write fails on a master that stopped reading but
// not on one that reads slowly; and at once when ctx ends.
type progressWriter struct {
	ctx context.Context
	c   net.Conn
}

func (w *progressWriter) Write(p []byte) (int, error) {
	stop := context.AfterFunc(w.ctx, func() { w.c.SetWriteDeadline(time.Now()) })
	defer stop()
	n := 0
	for n < len(p) {
		if err := w.ctx.Err(); err != nil {
			return n, err
		}
		w.c.SetWriteDeadline(time.Now().Add(writeStall))
		k, err := w.c.Write(p[n:min(len(p), n+writePiece)])
		n += k
		if err != nil {
			if w.ctx.Err() != nil {
				err = w.ctx.Err()
			}
			return n, err
		}
	}
	return n, nil
}

func (r *Router) dropLocked() {
	if r.conn != nil {
		r.conn.Close()
		r.idle.Stop()
		r.conn = nil
	}
}

func (r *Router) closeIdle() {
	if r.mu.TryLock() { // busy writing: not idle
		r.dropLocked()
		r.mu.Unlock()
	}
}

// Close closes the stream to the master; later sends fail.
func (r *Router) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.dropLocked()
}

// serve reads a peer's trace stream into the local collector, as long as
// this node is the master.
func (r *Router) serve(ctx context.Context, peer, _ string, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	for {
		msg, err := readMsg(c)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				r.log.Debug("trace stream ended", "from", peer, "err", err)
			}
			return
		}
		if !r.becameMaster(ctx) {
			// The sender's view of the master was stale; the master's merge
			// will time out and record the rank as missing.
			r.log.Warn("trace message for the master, but this node is not it", "from", peer)
			return
		}
		switch m := msg.(type) {
		case *wire.TraceTask:
			err = r.local.Task(peer, m)
		case *wire.TraceChunk:
			err = r.local.Chunk(peer, m)
		}
		if err != nil {
			r.log.Warn("trace from rank", "from", peer, "err", err)
		}
	}
}

// masterWait is how long a node that gets trace messages for the master
// waits to become it. After an election, the others may follow the new
// master a few ticks before it counts itself as one: messages sent again
// to it then were dropped (a 10-minute chaos run lost a chat's trace so,
// when the master crashed).
const masterWait = 3 * time.Second

// becameMaster reports whether this node is the master, or becomes it
// within masterWait.
func (r *Router) becameMaster(ctx context.Context) bool {
	deadline := time.Now().Add(masterWait)
	for r.node.Master() != r.node.ID() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// readMsg reads one trace message (TraceTask or TraceChunk) of at most
// maxFrame bytes from a trace stream.
func readMsg(c io.Reader) (wire.Message, error) {
	typ, payload, err := wire.ReadFrame(c, maxFrame)
	if err != nil {
		return nil, err
	}
	if typ != wire.TypeTraceTask && typ != wire.TypeTraceChunk {
		return nil, fmt.Errorf("%s on a trace stream", typ)
	}
	return wire.Decode(typ, payload)
}
