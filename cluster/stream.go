package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/internal/ident"
)

// Streams are authenticated links (TLS 1.3 under the cluster key, like
// every peer link) that the node hands to their handler as plain
// connections, for protocols above the cluster layer: the agent's peer API,
// pipeline rank links, the ring benchmark, trace shipping. Each protocol
// names itself with a Purpose and registers a handler with HandleStream.
// Their bytes count in the peer's traffic.

// Purpose names what a stream carries: 1..32 bytes of [a-z0-9-]. The
// control link ("") and the probe link ("probe") are the node's own.
type Purpose string

// The agent's stream purposes.
const (
	// PurposeHTTP carries the agent's peer HTTP API (requests forwarded
	// from another node).
	PurposeHTTP Purpose = "http"
	// PurposeRank carries a pipeline's rank link; the stream id names the
	// receiving rank (<instance>-r<rank>).
	PurposeRank Purpose = "rank"
)

// purposeProbe is the node's own link-probe echo link.
const purposeProbe Purpose = "probe"

// Valid reports whether p may name a stream (the node's own purposes,
// "", "probe" and "beat", are not streams).
func (p Purpose) Valid() error {
	if p == "" || p == purposeProbe || p == purposeBeat {
		return fmt.Errorf("stream purpose %q is reserved", p)
	}
	return wire.ValidPurpose(string(p))
}

// StreamHandler takes an accepted stream from member peer; id is what the
// dialler said the stream is for (may be empty). The handler owns c. It
// runs on its own goroutine, which Run waits for, so it must return soon
// after ctx (the node's) ends.
type StreamHandler func(ctx context.Context, peer, id string, c net.Conn)

// streams holds the registered stream handlers.
type streams struct {
	mu       sync.Mutex // guards handlers
	handlers map[Purpose]StreamHandler
}

func (s *streams) get(p Purpose) StreamHandler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handlers[p]
}

// HandleStream makes h take the streams of purpose p that peers open;
// streams of a purpose with no handler are refused. A later call for the
// same purpose replaces h. It panics if p is not Valid (a programming
// error, as with http.Handle). Safe to call before or during Run.
func (n *Node) HandleStream(p Purpose, h StreamHandler) {
	if err := p.Valid(); err != nil {
		panic(err)
	}
	n.streams.mu.Lock()
	defer n.streams.mu.Unlock()
	if n.streams.handlers == nil {
		n.streams.handlers = map[Purpose]StreamHandler{}
	}
	n.streams.handlers[p] = h
}

// DialStream opens a stream of purpose p to member peer; id (may be
// empty, else an id of 1..64 bytes of [A-Za-z0-9_-]) tells the peer what
// it is for. The caller owns the returned conn.
func (n *Node) DialStream(ctx context.Context, peer string, p Purpose, id string) (net.Conn, error) {
	if err := p.Valid(); err != nil {
		return nil, err
	}
	if id != "" {
		if err := ident.ValidInstanceID(id); err != nil {
			return nil, fmt.Errorf("stream id: %w", err)
		}
	}
	c, err := n.dialPurpose(ctx, peer, p, id)
	if err != nil {
		return nil, fmt.Errorf("%s stream to %s: %w", p, peer, err)
	}
	return &countedConn{Conn: c.tc, t: c.traffic}, nil
}

// dialPurpose opens a link of purpose (and id) to member peer, at the
// address of our control link to it, and checks who answered.
func (n *Node) dialPurpose(ctx context.Context, peer string, p Purpose, id string) (*conn, error) {
	out, err := n.waitLink(ctx, peer)
	if err != nil {
		return nil, err
	}
	if out.addr == "" {
		return nil, errors.New("no known address")
	}
	c, err := n.dialTLS(ctx, out.addr, p, id)
	if err != nil {
		return nil, err
	}
	if c.peer != peer {
		c.tc.Close()
		return nil, fmt.Errorf("%s answered for %s", out.addr, peer)
	}
	return c, nil
}

// dialTLS dials addr over the transport and completes the handshake for a
// link of purpose p.
func (n *Node) dialTLS(ctx context.Context, addr string, p Purpose, id string) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	raw, err := n.cfg.Transport.Dial(dctx, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, n.cfg.ClientTLS)
	stop := context.AfterFunc(dctx, func() { tc.SetDeadline(time.Now()) })
	c, err := n.handshakeAs(tc, p, id)
	stop()
	if err == nil && dctx.Err() != nil {
		err = dctx.Err()
	}
	if err != nil {
		tc.Close()
		return nil, err
	}
	return c, nil
}

// acceptStream runs the handler of an accepted stream.
func (n *Node) acceptStream(ctx context.Context, c *conn) {
	h := n.streams.get(Purpose(c.hello.Purpose))
	if h == nil {
		n.log.Debug("stream of unknown purpose refused", "peer", c.peer, "purpose", c.hello.Purpose)
		c.tc.Close()
		return
	}
	h(ctx, c.peer, c.hello.StreamID, &countedConn{Conn: c.tc, t: c.traffic})
}

// linkWait bounds how long a stream dial waits for the control link to a
// member that was heard from but not yet dialled (dials happen every
// quarter heartbeat).
const linkWait = 3 * time.Second

// waitLink returns our outbound control link to peer, waiting a little
// for one still being set up.
func (n *Node) waitLink(ctx context.Context, peer string) (*conn, error) {
	deadline := time.Now().Add(linkWait)
	for {
		n.mu.Lock()
		c := n.out[peer]
		n.mu.Unlock()
		if c != nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no link to member %s", peer)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// countedConn adds what crosses a stream to the peer's byte counters
// (TLS payload bytes, like the other links).
type countedConn struct {
	net.Conn
	t *traffic
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.t.recv.Add(uint64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.t.sent.Add(uint64(n))
	return n, err
}
