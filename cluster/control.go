package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Control links: one authenticated link per peer, dialled by us, carries
// heartbeats and replication. Every link, whatever its purpose, opens with
// TLS and a Hello exchange; the accept loop then routes it by purpose.

// dialPeers connects to every listed peer we have no outbound link to.
func (n *Node) dialPeers(ctx context.Context, wg *sync.WaitGroup) {
	peers := slices.Clone(n.cfg.Peers()) // appended to below: never touch the caller's array
	n.mu.Lock()
	for _, p := range n.learned {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	for _, p := range peers {
		if !n.startDial(p) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { n.mu.Lock(); delete(n.dialing, p.Addr); n.mu.Unlock() }()
			n.dial(ctx, wg, p)
		}()
	}
}

// startDial reports whether p should be dialled now, and if so marks it
// as being dialled.
func (n *Node) startDial(p PeerAddr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	id := p.NodeID
	if id == "" {
		id = n.addrPeer[p.Addr] // a static peer we have reached before
	}
	_, connected := n.out[id]
	busy := n.dialing[p.Addr]
	recent := time.Since(n.lastDial[p.Addr]) < n.cfg.Heartbeat
	if id == n.cfg.NodeID || (id != "" && connected) || busy || recent {
		return false
	}
	n.dialing[p.Addr] = true
	if len(n.lastDial) >= 4*wire.MaxMembersPerMsg {
		clear(n.lastDial) // bound: addresses come and go
		clear(n.addrPeer)
	}
	n.lastDial[p.Addr] = time.Now()
	return true
}

// dial opens the control link to p and serves it until it fails.
func (n *Node) dial(ctx context.Context, wg *sync.WaitGroup, p PeerAddr) {
	c, err := n.dialTLS(ctx, p.Addr, "", "")
	n.cfg.DialResult(p, err)
	if err != nil {
		return
	}
	n.mu.Lock()
	n.addrPeer[p.Addr] = c.peer
	n.mu.Unlock()
	if c.peer == n.cfg.NodeID {
		c.tc.Close() // our own address (static or loopback list)
		return
	}
	n.mu.Lock()
	if old := n.out[c.peer]; old != nil {
		n.mu.Unlock()
		c.tc.Close() // raced with another dial to the same node
		return
	}
	c.addr = p.Addr
	n.out[c.peer] = c
	n.mu.Unlock()
	n.table.Heard(c.peer, c.hello.StartedAt, time.Now())
	n.log.Debug("connected", "peer", c.peer, "addr", p.Addr)
	// Measure the new link, and give heartbeats their own, now rather
	// than from the next heartbeat on.
	n.ensureProbeLinks(ctx, wg)
	n.ensureBeatLinks(ctx, wg)
	n.serveConn(ctx, wg, c, func() {
		n.mu.Lock()
		if n.out[c.peer] == c {
			delete(n.out, c.peer)
		}
		n.mu.Unlock()
	})
}

func (n *Node) acceptLoop(ctx context.Context, wg *sync.WaitGroup) error {
	var delay time.Duration
	for {
		raw, err := n.cfg.Listener.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Out of file descriptors and the like pass: retry, backing
			// off, as net/http does. Anything else ends the node.
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
				return fmt.Errorf("accept peer links: %w", err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			n.log.Warn("accept", "err", err, "retryIn", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.accept(ctx, wg, raw)
		}()
	}
}

// accept authenticates an inbound link and serves it by its purpose.
func (n *Node) accept(ctx context.Context, wg *sync.WaitGroup, raw net.Conn) {
	c, err := n.handshake(tls.Server(raw, n.cfg.ServerTLS))
	if err != nil {
		n.log.Debug("refused peer", "remote", raw.RemoteAddr().String(), "err", err)
		raw.Close()
		return
	}
	switch Purpose(c.hello.Purpose) {
	case "":
	case purposeProbe:
		n.echoProbes(ctx, c)
		return
	case purposeBeat:
		n.table.Heard(c.peer, c.hello.StartedAt, time.Now())
		n.serveConn(ctx, wg, c, nil)
		return
	default:
		n.acceptStream(ctx, c)
		return
	}
	n.table.Heard(c.peer, c.hello.StartedAt, time.Now())
	if host, _, err := net.SplitHostPort(raw.RemoteAddr().String()); err == nil && c.hello.PeerPort > 0 {
		n.mu.Lock()
		if len(n.learned) < wire.MaxMembersPerMsg {
			n.learned[c.peer] = PeerAddr{Addr: net.JoinHostPort(host, fmt.Sprint(c.hello.PeerPort)), NodeID: c.peer}
		}
		n.mu.Unlock()
	}
	n.mu.Lock()
	n.in[c] = true
	n.mu.Unlock()
	n.serveConn(ctx, wg, c, func() {
		n.mu.Lock()
		delete(n.in, c)
		n.mu.Unlock()
	})
}

// handshake completes TLS, checks the certificate's node id and exchanges
// Hello frames.
func (n *Node) handshake(tc *tls.Conn) (*conn, error) { return n.handshakeAs(tc, "", "") }

// handshakeAs is handshake for a link of purpose p ("" for the control
// link) and id.
func (n *Node) handshakeAs(tc *tls.Conn, p Purpose, id string) (*conn, error) {
	tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	certID, err := n.cfg.PeerID(tc.ConnectionState())
	if err != nil {
		return nil, fmt.Errorf("peer certificate: %w", err)
	}
	c := newConn(tc, n.log)
	if err := c.writeNow(&wire.Hello{NodeID: n.cfg.NodeID, StartedAt: n.cfg.StartedAt, Version: n.cfg.Version, PeerPort: n.cfg.PeerPort,
		Purpose: string(p), StreamID: id}); err != nil {
		return nil, err
	}
	typ, payload, err := wire.ReadFrame(tc, 0)
	if err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	msg, err := wire.Decode(typ, payload)
	if err != nil {
		return nil, err
	}
	h, ok := msg.(*wire.Hello)
	if !ok {
		return nil, fmt.Errorf("first frame is %s, want hello", typ)
	}
	if h.NodeID != certID {
		return nil, fmt.Errorf("hello says node %q but its certificate is for %q", h.NodeID, certID)
	}
	tc.SetDeadline(time.Time{})
	c.peer, c.hello = h.NodeID, *h
	c.traffic = n.trafficFor(c.peer)
	return c, nil
}

// serveConn reads frames until the connection fails; then it runs
// closed, if set. A beat link carries heartbeats and acks only.
func (n *Node) serveConn(ctx context.Context, wg *sync.WaitGroup, c *conn, closed func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.writeLoop(ctx)
	}()
	stop := context.AfterFunc(ctx, c.close)
	defer stop()
	work := make(chan any, sendQueueLen)
	c.work = make(chan func(), sendQueueLen)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-c.done:
				return
			case msg := <-work:
				n.handle(c, msg)
			case f := <-c.work:
				f()
			}
		}
	}()
	defer func() {
		c.close()
		if closed != nil {
			closed()
		}
	}()
	beat := Purpose(c.hello.Purpose) == purposeBeat
	limit, throttled := newFrameLimiter(linkFramesPerSec, linkFrameBurst, time.Now()), false
	submits := newFrameLimiter(submitEventsPerSec, submitEventBurst, time.Now())
	for {
		// A silent peer is gone after FailAfter; give reads a bit more.
		c.tc.SetReadDeadline(time.Now().Add(n.cfg.FailAfter + n.cfg.Heartbeat))
		typ, payload, err := wire.ReadFrame(c.tc, 0)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Debug("peer link closed", "peer", c.peer, "err", err)
			}
			return
		}
		readAt := time.Now()
		if !n.pace(c, limit.take(readAt), &throttled, "framesPerSec", linkFramesPerSec) {
			return
		}
		c.traffic.recv.Add(uint64(5 + len(payload)))
		msg, err := wire.Decode(typ, payload)
		if err != nil {
			n.log.Warn("bad frame from peer; closing link", "peer", c.peer, "err", err)
			return
		}
		if sub, ok := msg.(*wire.Submit); ok &&
			!n.pace(c, submits.takeN(time.Now(), float64(len(sub.Events))), &throttled, "eventsPerSec", submitEventsPerSec) {
			return
		}
		switch m := msg.(type) {
		case *wire.Heartbeat, *wire.ProbeAck:
			// Liveness messages are answered on the read loop, never queued
			// behind event work.
			n.handleProbe(c, m, readAt)
		default:
			if beat {
				n.log.Warn("data on a heartbeat link; closing it", "peer", c.peer, "type", typ)
				return
			}
			// Everything else may apply events, hash state or snapshot:
			// it runs on the link's worker so probes are never stuck
			// behind it.
			if !n.enqueue(c, work, msg) {
				return
			}
		}
	}
}

// pace holds a link's reader back for d (0: not at all), logging the
// first time a link is throttled. It reports false if the link closed
// meanwhile.
func (n *Node) pace(c *conn, d time.Duration, throttled *bool, unit string, rate int) bool {
	if d <= 0 {
		return true
	}
	if !*throttled {
		*throttled = true
		n.log.Warn("peer sends over its control link's rate; throttling it", "peer", c.peer, unit, rate)
	}
	select {
	case <-time.After(d):
		return true
	case <-c.done:
		return false
	}
}

// enqueue hands msg to the link's worker. A full queue holds the reader
// back (TCP then slows the peer); a peer whose work has not drained within
// FailAfter is dropped (false).
func (n *Node) enqueue(c *conn, work chan<- any, msg any) bool {
	select {
	case work <- msg:
		return true
	default:
	}
	t := time.NewTimer(n.cfg.FailAfter)
	defer t.Stop()
	select {
	case work <- msg:
		return true
	case <-t.C:
		n.log.Warn("peer sends faster than we apply; dropping link", "peer", c.peer)
		return false
	case <-c.done:
		return false
	}
}

// handleProbe answers a heartbeat or records an ack's RTT and offset.
func (n *Node) handleProbe(c *conn, msg any, readAt time.Time) {
	switch m := msg.(type) {
	case *wire.Heartbeat:
		if m.NodeID != c.peer {
			return
		}
		n.table.Announced(c.peer, m.StartedAt, readAt, m.MasterID, m.Term)
		if f := n.cfg.OnHeartbeat; f != nil {
			f(c.peer, time.Unix(0, m.T1), readAt)
		}
		c.send(&wire.ProbeAck{NodeID: n.cfg.NodeID, Seq: m.Seq, T1: m.T1, T2: readAt.UnixNano()})
		// Learning peers and catching up may take locks and send: off the
		// read loop's probe path, in order with the link's other work.
		hb := m
		select {
		case c.work <- func() { n.learn(hb.Peers); n.catchUp(hb) }:
		default:
		}
	case *wire.ProbeAck:
		// Liveness only: RTT and offset come from the probe link.
		n.table.Heard(c.peer, c.hello.StartedAt, readAt)
	}
}

// learn adds peer addresses heard from a member, for members we have no
// link to yet.
func (n *Node) learn(peers []wire.PeerInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range peers {
		if p.NodeID == n.cfg.NodeID || n.out[p.NodeID] != nil || len(n.learned) >= wire.MaxMembersPerMsg {
			continue
		}
		if _, ok := n.learned[p.NodeID]; !ok {
			n.learned[p.NodeID] = PeerAddr{Addr: p.Addr, NodeID: p.NodeID}
		}
	}
}
