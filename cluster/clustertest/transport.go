package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/orrery-cluster/orrery/cluster"
)

// ErrRefused is what a dial to an address nobody listens on returns.
var ErrRefused = errors.New("connection refused")

// ErrUnreachable is what a dial from or to an isolated host returns.
var ErrUnreachable = errors.New("network is unreachable")

// Network is an in-memory network: hosts listen on and dial "host:port"
// addresses, and connections are buffered in memory. Safe for concurrent
// use.
type Network struct {
	mu        sync.Mutex // guards the fields below
	listeners map[string]*listener
	nextPort  int
	cut       map[string]bool // isolated hosts
}

// Isolate cuts host off the network, as a pulled cable would: its dials
// and dials to it fail, and what either side writes on an existing
// connection is dropped, so that links fall silent rather than close.
func (nw *Network) Isolate(host string) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.cut[host] = true
}

// Heal undoes Isolate.
func (nw *Network) Heal(host string) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	delete(nw.cut, host)
}

// severed reports whether traffic between addresses a and b is dropped.
func (nw *Network) severed(a, b addr) bool {
	ha, _, _ := net.SplitHostPort(string(a))
	hb, _, _ := net.SplitHostPort(string(b))
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.cut[ha] || nw.cut[hb]
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{listeners: map[string]*listener{}, nextPort: 10000, cut: map[string]bool{}}
}

// Host returns the transport of host on the network: what it listens on
// and dials from carries host as the address's host part.
func (nw *Network) Host(host string) *Transport { return &Transport{nw: nw, host: host} }

// Transport is one host's view of a Network.
type Transport struct {
	nw   *Network
	host string
}

var _ cluster.Transport = (*Transport)(nil)

// Listen listens at addr's port on this host (port 0 or an empty addr:
// the next free port); addr's host part is ignored.
func (t *Transport) Listen(a string) (net.Listener, error) {
	port := 0
	if a != "" {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("listen %q: %w", a, err)
		}
		if port, err = strconv.Atoi(p); err != nil || port < 0 || port > 65535 {
			return nil, fmt.Errorf("listen %q: bad port", a)
		}
	}
	nw := t.nw
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if port == 0 {
		port = nw.portLocked()
	}
	at := addr(net.JoinHostPort(t.host, strconv.Itoa(port)))
	if nw.listeners[string(at)] != nil {
		return nil, fmt.Errorf("listen %s: address in use", at)
	}
	l := &listener{nw: nw, addr: at, conns: make(chan net.Conn, 64), closed: make(chan struct{})}
	nw.listeners[string(at)] = l
	return l, nil
}

func (nw *Network) portLocked() int {
	nw.nextPort++
	return nw.nextPort
}

// Dial connects to the listener at a, from a fresh port of this host. A
// listener with a full backlog refuses, like a TCP one.
func (t *Transport) Dial(ctx context.Context, a string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dial %s: %w", a, err)
	}
	nw := t.nw
	nw.mu.Lock()
	defer nw.mu.Unlock()
	l := nw.listeners[a]
	if l == nil {
		return nil, fmt.Errorf("dial %s: %w", a, ErrRefused)
	}
	if h, _, _ := net.SplitHostPort(a); nw.cut[t.host] || nw.cut[h] {
		return nil, fmt.Errorf("dial %s: %w", a, ErrUnreachable)
	}
	c, s := pipe(nw, addr(net.JoinHostPort(t.host, strconv.Itoa(nw.portLocked()))), l.addr)
	select {
	case l.conns <- s: // under nw.mu: Close has not drained yet
		return c, nil
	default:
		return nil, fmt.Errorf("dial %s: backlog full: %w", a, ErrRefused)
	}
}

// listener is a Transport's listener.
type listener struct {
	nw        *Network
	addr      addr
	conns     chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and frees the address; connections dialled but
// not accepted yet are closed.
func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		l.nw.mu.Lock()
		if l.nw.listeners[string(l.addr)] == l {
			delete(l.nw.listeners, string(l.addr))
		}
		l.nw.mu.Unlock()
		close(l.closed)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }
