package cluster

import (
	"context"
	"net"
)

// Transport carries the node's links as plain connections; the node runs
// mutual TLS on top of each. TCPTransport is the real one; the in-memory
// network of cluster/clustertest lets tests run nodes without sockets.
// Implementations are safe for concurrent use.
type Transport interface {
	// Listen returns a listener for peer links at addr (host:port, port 0
	// for any). The node itself only dials: its Config.Listener comes from
	// Listen.
	Listen(addr string) (net.Listener, error)
	// Dial connects to addr, blocking until it answers, fails or ctx ends.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// TCPTransport is the Transport of real nodes: TCP, with dialTimeout.
type TCPTransport struct{}

var _ Transport = TCPTransport{}

// Listen listens on TCP.
func (TCPTransport) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// Dial dials TCP.
func (TCPTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	return d.DialContext(ctx, "tcp", addr)
}
