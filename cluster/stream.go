package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// Streams are authenticated links (TLS 1.3 under the cluster key, like
// every peer link) that the node hands to the agent as plain connections,
// for the agent's own protocols: the peer API that forwards requests to
// the node running an instance. Their bytes count in the peer's traffic.

// DialStream opens a stream link of purpose to member peer; id (may be
// empty) tells the peer what the stream is for (e.g. which rank).
func (n *Node) DialStream(ctx context.Context, peer, purpose, id string) (net.Conn, error) {
	c, err := n.dialPurpose(ctx, peer, purpose, id)
	if err != nil {
		return nil, fmt.Errorf("stream to %s: %w", peer, err)
	}
	return &countedConn{Conn: c.tc, t: c.traffic}, nil
}

// dialPurpose opens a link of purpose (and id) to member peer, at the
// address of our control link to it, and checks who answered.
func (n *Node) dialPurpose(ctx context.Context, peer, purpose, id string) (*conn, error) {
	conns, err := n.waitLinks(ctx, []string{peer})
	if err != nil {
		return nil, err
	}
	addr := conns[peer].addr
	if addr == "" {
		return nil, errors.New("no known address")
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: n.cfg.ClientTLS}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := raw.(*tls.Conn)
	c, err := n.handshakeAs(tc, purpose, id)
	if err != nil {
		tc.Close()
		return nil, err
	}
	if c.peer != peer {
		tc.Close()
		return nil, fmt.Errorf("%s answered for %s", addr, peer)
	}
	return c, nil
}

func (n *Node) acceptStream(c *conn) {
	if n.cfg.OnStream == nil {
		c.tc.Close()
		return
	}
	n.cfg.OnStream(c.peer, c.hello.Purpose, c.hello.Bench, &countedConn{Conn: c.tc, t: c.traffic})
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
