// Package peerapi carries HTTP between nodes over the cluster's
// authenticated stream links: a net.Listener that the node's peer API
// server accepts streams from, and a client that reaches
// http://<node id>/… by opening a stream to that node.
package peerapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// Listener turns the stream links the cluster hands over into a
// net.Listener for an http.Server.
type Listener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

var _ net.Listener = (*Listener)(nil)

// NewListener returns a listener that reports addr as its address.
func NewListener(addr net.Addr) *Listener {
	return &Listener{ch: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// Offer hands c to Accept, or closes it when the listener is closed. It
// blocks until one of the two happens.
func (l *Listener) Offer(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

// Accept returns the next offered stream.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Offer return; it is idempotent.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the address given to NewListener.
func (l *Listener) Addr() net.Addr { return l.addr }

// NewClient returns a client for http://<node id>/… URLs: each connection
// is a stream dialled to that node. The host must be a valid node id.
func NewClient(dial func(ctx context.Context, node string) (net.Conn, error)) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if err := ident.ValidNodeID(host); err != nil {
				return nil, fmt.Errorf("peer %q: %w", host, err)
			}
			return dial(ctx, host)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
}
