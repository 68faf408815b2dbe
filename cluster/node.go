package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Application is what the node layer needs from the agent's state store.
// Its state methods are called from the node's goroutines one at a time
// (serialised by the node) and must not block for long. MasterChanged and
// MemberGone are called with no lock held, so they may call Node.Publish.
type Application interface {
	// LastIdx is the index of the last applied event (-1: none).
	LastIdx() int64
	// Apply applies consecutive indexed events, starting at LastIdx()+1.
	Apply(evs []wire.IndexedEvent) error
	// EventsSince returns retained events from since on (at most max);
	// ok is false if they are no longer retained.
	EventsSince(since int64, max int) (evs []wire.IndexedEvent, ok bool)
	// Snapshot returns the whole state and the index it is at.
	Snapshot() (lastIdx int64, state json.RawMessage, err error)
	// Restore replaces the state with a master's snapshot.
	Restore(lastIdx int64, state json.RawMessage) error
	// StateHash is a digest of the current state, for convergence checks.
	StateHash() string
	// MasterChanged is told the new master's id ("" never) after an
	// election changed it; self reports whether that is this node. The
	// agent republishes what must not be lost (its identity).
	MasterChanged(master string, self bool)
	// MemberGone is called on the master when a member is swept, so that
	// the agent can publish the event that removes it from the state.
	MemberGone(id string)
}

// PeerAddr is an address to dial, with the node id when discovery knows it.
type PeerAddr struct {
	Addr   string
	NodeID string
}

// Config configures a Node. Zero durations take the defaults.
type Config struct {
	NodeID    string
	StartedAt time.Time
	Version   string
	// Listener accepts peer connections; the node owns and closes it.
	Listener net.Listener
	// ServerTLS and ClientTLS are the mutual TLS 1.3 configs from the
	// cluster key; PeerID returns the node id a verified peer proved.
	ServerTLS, ClientTLS *tls.Config
	PeerID               func(tls.ConnectionState) (string, error)
	// PeerPort is the port of Listener as peers should dial it; it is
	// sent in Hello so that a peer we dialled can dial back.
	PeerPort int
	// Peers lists the addresses to keep connections to.
	Peers func() []PeerAddr
	// DialResult reports each dial's outcome (nil: reachable), so that
	// discovery can say why a peer is unreachable.
	DialResult func(p PeerAddr, err error)
	App        Application
	// Heartbeat is the heartbeat/probe period (1 s); FailAfter is the
	// silence after which a member is gone (3 s).
	Heartbeat, FailAfter time.Duration
	Logger               *slog.Logger
	// OnTrace receives, on the master, the TraceTask and TraceChunk
	// messages ranks ship with ShipTrace (from is the sending node, this
	// node's own id for local ones). It runs on the link's work goroutine:
	// it must not block for long. Nil drops them.
	OnTrace func(from string, msg any)
	// RingRun, when set, is called as this node's rank of a ring benchmark
	// starts; the function it returns is called when the rank is done, with
	// its hop timings (those it got to, on an error too) so that the agent
	// can trace them. Either may be nil.
	RingRun func(start wire.RingStart) (done func(rep *wire.RingReport, err error))
	// OnStream takes an accepted stream link (see DialStream) and owns
	// it; purpose is wire.StreamHTTP or wire.StreamRank, id what the
	// dialler said it is for. Nil refuses streams.
	OnStream func(peer, purpose, id string, c net.Conn)
}

// Timeouts and queue sizes.
const (
	dialTimeout      = 2 * time.Second
	handshakeTimeout = 3 * time.Second
	writeTimeout     = 5 * time.Second
	sendQueueLen     = 256
	fetchBatch       = 1024
)

// Node is one cluster member: it keeps a connection to every peer, tracks
// membership, elects the master and replicates events through it.
type Node struct {
	cfg   Config
	log   *slog.Logger
	table *Table

	appMu sync.Mutex // serialises every call into cfg.App

	mu           sync.Mutex       // guards the fields below
	out          map[string]*conn // outbound connection per peer node id
	dialing      map[string]bool  // addresses being dialled
	master       string
	seq          uint64
	pending      []wire.RawEvent // local events waiting for a master link
	links        map[string]*linkStat
	traffic      map[string]*traffic   // per peer; kept across reconnects
	rings        map[string]*ringRun   // ring benchmarks in progress, by id
	probes       map[string]*probeLink // outbound probe link per peer
	probeDialing map[string]bool
	// lastDial rate-limits dials per address; addrPeer remembers which
	// node answered at an address (static peers come without an id).
	lastDial map[string]time.Time
	addrPeer map[string]string
	learned  map[string]PeerAddr // peers that dialled us: their advertised port
	// needResync is set when we follow a new master and cleared when its
	// snapshot arrives; until then its events are not applied.
	needResync bool
	resyncAt   time.Time // when we last asked the master for a snapshot
}

// Status is a node's view of the cluster, for the API.
type Status struct {
	NodeID              string   `json:"nodeId"`
	MasterID            string   `json:"masterId"`
	IsMaster            bool     `json:"isMaster"`
	Members             []Member `json:"members"`
	LastEventAppliedIdx int64    `json:"lastEventAppliedIdx"`
	StateHash           string   `json:"stateHash"`
	Links               []Link   `json:"links"`
}

// NewNode validates cfg. Run starts it.
func NewNode(cfg Config) (*Node, error) {
	switch {
	case wire.ValidNodeID(cfg.NodeID) != nil:
		return nil, fmt.Errorf("cluster node: bad node id %q", cfg.NodeID)
	case cfg.Listener == nil || cfg.ServerTLS == nil || cfg.ClientTLS == nil || cfg.PeerID == nil || cfg.App == nil || cfg.Peers == nil:
		return nil, errors.New("cluster node: listener, TLS configs, PeerID, Peers and App are required")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.FailAfter <= 0 {
		cfg.FailAfter = DefaultFailAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DialResult == nil {
		cfg.DialResult = func(PeerAddr, error) {}
	}
	n := &Node{
		cfg:          cfg,
		log:          cfg.Logger.With("component", "cluster"),
		table:        NewTable(Member{NodeID: cfg.NodeID, StartedAt: cfg.StartedAt}, cfg.FailAfter),
		out:          map[string]*conn{},
		dialing:      map[string]bool{},
		links:        map[string]*linkStat{},
		traffic:      map[string]*traffic{},
		rings:        map[string]*ringRun{},
		lastDial:     map[string]time.Time{},
		probes:       map[string]*probeLink{},
		probeDialing: map[string]bool{},
		addrPeer:     map[string]string{},
		learned:      map[string]PeerAddr{},
	}
	n.master = cfg.NodeID // alone, a node is its own master
	return n, nil
}

// Run serves peers until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		n.cfg.Listener.Close()
		n.mu.Lock()
		for _, c := range n.out {
			c.close()
		}
		n.mu.Unlock()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		n.acceptLoop(ctx, &wg)
	}()
	// Failure detection and election run four times per heartbeat, so a
	// silent peer is gone within FailAfter plus a quarter heartbeat.
	t := time.NewTicker(n.cfg.Heartbeat / sweepsPerHeartbeat)
	defer t.Stop()
	for i := 0; ; i++ {
		n.tick(ctx, &wg, i%sweepsPerHeartbeat == 0)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Publish submits a local event: applied at once on the master, sent to
// the master otherwise (queued, bounded, while there is no master link).
func (n *Node) Publish(ev wire.RawEvent) error {
	n.mu.Lock()
	master := n.master
	if master != n.cfg.NodeID {
		c := n.out[master]
		if c == nil {
			if len(n.pending) >= sendQueueLen {
				n.pending = n.pending[1:] // samples are superseded; keep the newest
			}
			n.pending = append(n.pending, ev)
			n.mu.Unlock()
			return nil
		}
		n.mu.Unlock()
		return c.send(&wire.Submit{Events: []wire.RawEvent{ev}})
	}
	n.mu.Unlock()
	return n.indexAndBroadcast([]wire.RawEvent{ev})
}

// indexAndBroadcast is the master's path: give events the next indices,
// apply them locally, send them to every peer.
func (n *Node) indexAndBroadcast(evs []wire.RawEvent) error {
	n.appMu.Lock()
	next := n.cfg.App.LastIdx() + 1
	batch := make([]wire.IndexedEvent, len(evs))
	for i, e := range evs {
		batch[i] = wire.IndexedEvent{Idx: next + int64(i), Type: e.Type, Event: e.Event}
	}
	err := n.cfg.App.Apply(batch)
	n.appMu.Unlock()
	if err != nil {
		return fmt.Errorf("apply as master: %w", err)
	}
	msg := &wire.Events{MasterID: n.cfg.NodeID, Events: batch}
	n.mu.Lock()
	conns := make([]*conn, 0, len(n.out))
	for _, c := range n.out {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.send(msg) // a failed send drops the conn; the peer refetches
	}
	return nil
}

// Addr returns the address peer links are accepted on.
func (n *Node) Addr() net.Addr { return n.cfg.Listener.Addr() }

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	n.appMu.Lock()
	idx, hash := n.cfg.App.LastIdx(), n.cfg.App.StateHash()
	n.appMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	return Status{NodeID: n.cfg.NodeID, MasterID: n.master, IsMaster: n.master == n.cfg.NodeID,
		Members: n.table.Alive(), LastEventAppliedIdx: idx, StateHash: hash, Links: n.linksLocked()}
}

const sweepsPerHeartbeat = 4

// tick sweeps silent members and re-elects; on beat it also dials new
// peers, sends heartbeats and flushes queued events.
func (n *Node) tick(ctx context.Context, wg *sync.WaitGroup, beat bool) {
	now := time.Now()
	gone := n.table.Sweep(now)
	alive := n.table.Alive()
	aliveSet := map[string]bool{}
	ids := make([]string, len(alive))
	for i, m := range alive {
		aliveSet[m.NodeID], ids[i] = true, m.NodeID
	}
	master := ElectMaster(alive)

	n.mu.Lock()
	for _, id := range gone {
		if c := n.out[id]; c != nil {
			c.close()
			delete(n.out, id)
		}
		delete(n.links, id)
		if pl := n.probes[id]; pl != nil {
			pl.tc.Close()
		}
		delete(n.learned, id)
	}
	changed := master != n.master
	n.master = master
	if changed {
		n.needResync = master != n.cfg.NodeID
	}
	resync := n.needResync
	isMaster := master == n.cfg.NodeID
	n.mu.Unlock()

	for _, id := range gone {
		n.log.Info("member gone", "member", id)
		if isMaster {
			n.cfg.App.MemberGone(id)
		}
	}
	if resync {
		n.requestSnapshot(master)
	}
	if changed {
		n.log.Info("master changed", "master", master, "self", isMaster)
		n.cfg.App.MasterChanged(master, isMaster)
	}

	// Dial on every tick, so a peer found by discovery is linked within a
	// quarter heartbeat; dialPeers rate-limits each address itself.
	n.dialPeers(ctx, wg)
	if !beat {
		return
	}

	n.appMu.Lock()
	idx, hash := n.cfg.App.LastIdx(), n.cfg.App.StateHash()
	n.appMu.Unlock()
	n.mu.Lock()
	n.seq++
	hb := &wire.Heartbeat{NodeID: n.cfg.NodeID, StartedAt: n.cfg.StartedAt, Seq: n.seq, T1: now.UnixNano(),
		MasterID: master, LastIdx: idx, StateHash: hash, Members: ids}
	for id, c := range n.out {
		hb.Peers = append(hb.Peers, wire.PeerInfo{NodeID: id, Addr: c.addr})
	}
	for id, p := range n.learned {
		if n.out[id] == nil && len(hb.Peers) < wire.MaxMembersPerMsg {
			hb.Peers = append(hb.Peers, wire.PeerInfo{NodeID: id, Addr: p.Addr})
		}
	}
	conns := make([]*conn, 0, len(n.out))
	for _, c := range n.out {
		conns = append(conns, c)
	}
	var flush []wire.RawEvent
	var masterConn *conn
	if !isMaster && len(n.pending) > 0 {
		if masterConn = n.out[master]; masterConn != nil {
			flush, n.pending = n.pending, nil
		}
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.send(hb)
	}
	n.ensureProbeLinks(ctx, wg)
	n.sendProbes(hb.Seq)
	if len(flush) > 0 {
		masterConn.send(&wire.Submit{Events: flush})
	}
	if isMaster && len(n.pending) > 0 {
		n.mu.Lock()
		flush, n.pending = n.pending, nil
		n.mu.Unlock()
		n.indexAndBroadcast(flush)
	}
}

func (n *Node) requestSnapshot(master string) {
	n.mu.Lock()
	c := n.out[master]
	if c == nil || time.Since(n.resyncAt) < n.cfg.Heartbeat {
		n.mu.Unlock()
		return
	}
	n.resyncAt = time.Now()
	n.mu.Unlock()
	c.send(&wire.Fetch{Since: 0, Snapshot: true})
}

// dialPeers connects to every listed peer we have no outbound link to.
func (n *Node) dialPeers(ctx context.Context, wg *sync.WaitGroup) {
	peers := slices.Clone(n.cfg.Peers()) // appended to below: never touch the caller's array
	n.mu.Lock()
	for _, p := range n.learned {
		peers = append(peers, p)
	}
	n.mu.Unlock()
	for _, p := range peers {
		n.mu.Lock()
		id := p.NodeID
		if id == "" {
			id = n.addrPeer[p.Addr] // a static peer we have reached before
		}
		_, connected := n.out[id]
		busy := n.dialing[p.Addr]
		recent := time.Since(n.lastDial[p.Addr]) < n.cfg.Heartbeat
		skip := id == n.cfg.NodeID || (id != "" && connected) || busy || recent
		if !skip {
			n.dialing[p.Addr] = true
			if len(n.lastDial) >= 4*wire.MaxMembersPerMsg {
				clear(n.lastDial) // bound: addresses come and go
				clear(n.addrPeer)
			}
			n.lastDial[p.Addr] = time.Now()
		}
		n.mu.Unlock()
		if skip {
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

func (n *Node) dial(ctx context.Context, wg *sync.WaitGroup, p PeerAddr) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: n.cfg.ClientTLS}
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	raw, err := d.DialContext(dctx, "tcp", p.Addr)
	cancel()
	if err != nil {
		n.cfg.DialResult(p, err)
		return
	}
	c, err := n.handshake(raw.(*tls.Conn))
	n.cfg.DialResult(p, err)
	if err != nil {
		raw.Close()
		return
	}
	n.mu.Lock()
	n.addrPeer[p.Addr] = c.peer
	n.mu.Unlock()
	if c.peer == n.cfg.NodeID {
		raw.Close() // our own address (static or loopback list)
		return
	}
	n.mu.Lock()
	if old := n.out[c.peer]; old != nil {
		n.mu.Unlock()
		raw.Close() // raced with another dial to the same node
		return
	}
	c.addr = p.Addr
	n.out[c.peer] = c
	n.mu.Unlock()
	n.table.Heard(c.peer, c.hello.StartedAt, time.Now())
	n.log.Debug("connected", "peer", c.peer, "addr", p.Addr)
	n.serveConn(ctx, wg, c, true)
}

func (n *Node) acceptLoop(ctx context.Context, wg *sync.WaitGroup) {
	for {
		raw, err := n.cfg.Listener.Accept()
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("accept", "err", err)
			}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc := tls.Server(raw, n.cfg.ServerTLS)
			c, err := n.handshake(tc)
			if err != nil {
				n.log.Debug("refused peer", "remote", raw.RemoteAddr().String(), "err", err)
				raw.Close()
				return
			}
			switch c.hello.Purpose {
			case "ring":
				n.acceptRankLink(c)
				return
			case "probe":
				n.echoProbes(c)
				return
			case wire.StreamHTTP, wire.StreamRank:
				n.acceptStream(c)
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
			n.serveConn(ctx, wg, c, false)
		}()
	}
}

// handshake completes TLS, checks the certificate's node id and exchanges
// Hello frames.
func (n *Node) handshake(tc *tls.Conn) (*conn, error) { return n.handshakeAs(tc, "", "") }

// handshakeAs is handshake for a link with a purpose ("ring") other than
// the control link.
func (n *Node) handshakeAs(tc *tls.Conn, purpose, bench string) (*conn, error) {
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
		Purpose: purpose, Bench: bench}); err != nil {
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

// serveConn reads frames until the connection fails.
func (n *Node) serveConn(ctx context.Context, wg *sync.WaitGroup, c *conn, outbound bool) {
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
		if outbound {
			n.mu.Lock()
			if n.out[c.peer] == c {
				delete(n.out, c.peer)
			}
			n.mu.Unlock()
		}
	}()
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
		c.traffic.recv.Add(uint64(5 + len(payload)))
		msg, err := wire.Decode(typ, payload)
		if err != nil {
			n.log.Warn("bad frame from peer; closing link", "peer", c.peer, "err", err)
			return
		}
		switch m := msg.(type) {
		case *wire.Heartbeat, *wire.ProbeAck:
			// Liveness messages are answered on the read loop, never queued
			// behind event work.
			n.handleProbe(c, m, readAt)
		default:
			// Everything else may apply events, hash state or snapshot:
			// it runs on the link's worker so probes are never stuck
			// behind it.
			select {
			case work <- msg:
			default:
				n.log.Warn("peer sends faster than we apply; dropping link", "peer", c.peer)
				return
			}
		}
	}
}

// handleProbe answers a heartbeat or records an ack's RTT and offset.
func (n *Node) handleProbe(c *conn, msg any, readAt time.Time) {
	switch m := msg.(type) {
	case *wire.Heartbeat:
		if m.NodeID != c.peer {
			return
		}
		n.table.Heard(c.peer, m.StartedAt, readAt)
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

func (n *Node) handle(c *conn, msg any) {
	switch m := msg.(type) {
	case *wire.Submit:
		n.mu.Lock()
		isMaster := n.master == n.cfg.NodeID
		n.mu.Unlock()
		if !isMaster {
			return // the sender will learn the master from our heartbeats
		}
		if err := n.indexAndBroadcast(m.Events); err != nil {
			n.log.Warn("index submitted events", "from", c.peer, "err", err)
		}
	case *wire.Events:
		n.onEvents(c, m)
	case *wire.Fetch:
		n.onFetch(c, m)
	case *wire.Snapshot:
		n.onSnapshot(m)
	case *wire.RingStart:
		n.onRingStart(c, m)
	case *wire.RingReport:
		n.onRingReport(m)
	case *wire.TraceTask, *wire.TraceChunk:
		n.onTrace(c.peer, m)
	}
}

func (n *Node) onEvents(c *conn, m *wire.Events) {
	n.mu.Lock()
	master := n.master
	n.mu.Unlock()
	if m.MasterID != master || master == n.cfg.NodeID || len(m.Events) == 0 || n.resyncPending() {
		return // from a master we do not follow (yet)
	}
	n.appMu.Lock()
	next := n.cfg.App.LastIdx() + 1
	evs := m.Events
	for len(evs) > 0 && evs[0].Idx < next {
		evs = evs[1:] // already applied
	}
	var err error
	gap := len(evs) > 0 && evs[0].Idx > next
	if len(evs) > 0 && !gap {
		err = n.cfg.App.Apply(evs)
	}
	n.appMu.Unlock()
	switch {
	case gap:
		n.sendToMaster(master, &wire.Fetch{Since: next})
	case err != nil:
		n.log.Warn("apply events from master; resyncing", "err", err)
		n.requestSnapshot(master)
	}
}

// catchUp fetches what we miss when our master's heartbeat says it is
// ahead: events and snapshots travel on different links and can cross, and
// a quiet master sends no new event that would reveal the gap.
func (n *Node) catchUp(hb *wire.Heartbeat) {
	n.mu.Lock()
	follows := hb.NodeID == n.master && n.master != n.cfg.NodeID
	resync := n.needResync
	n.mu.Unlock()
	if !follows {
		return
	}
	if resync {
		n.requestSnapshot(hb.NodeID)
		return
	}
	n.appMu.Lock()
	last := n.cfg.App.LastIdx()
	n.appMu.Unlock()
	if hb.LastIdx > last {
		n.sendToMaster(hb.NodeID, &wire.Fetch{Since: last + 1})
	}
}

func (n *Node) linkLocked(peer string) *linkStat {
	l := n.links[peer]
	if l == nil {
		l = &linkStat{}
		n.links[peer] = l
	}
	return l
}

func (n *Node) trafficFor(peer string) *traffic {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.traffic[peer]
	if t == nil {
		if len(n.traffic) >= 4*wire.MaxMembersPerMsg {
			clear(n.traffic) // bound: peers come and go over weeks
		}
		t = &traffic{}
		n.traffic[peer] = t
	}
	return t
}

// Links returns the measured link to every peer we probe, sorted by peer.
func (n *Node) Links() []Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.linksLocked()
}

func (n *Node) linksLocked() []Link {
	out := []Link{}
	for id, l := range n.links {
		if l.samples == 0 {
			continue
		}
		loss, probes := l.lossPct((n.seq + 1) * ProbesPerBurst)
		off, unc := l.offset()
		lk := Link{PeerID: id, RTTLast: l.rttLast, RTTEWMA: l.rttEWMA, RTTMin: l.rttMin, Jitter: l.jitter,
			LossPct: loss, Probes: probes, ClockOffset: off, ClockOffsetUncertainty: unc, LastAck: l.lastAck}
		if c := n.out[id]; c != nil {
			lk.LocalAddr, lk.RemoteAddr = c.tc.LocalAddr().String(), c.tc.RemoteAddr().String()
		}
		if t := n.traffic[id]; t != nil {
			lk.BytesSent, lk.BytesRecv = t.sent.Load(), t.recv.Load()
		}
		out = append(out, lk)
	}
	slices.SortFunc(out, func(a, b Link) int { return strings.Compare(a.PeerID, b.PeerID) })
	return out
}

// BytesSent returns the bytes sent so far to each peer over all links, for
// every peer ever linked (Links lists only probed ones).
func (n *Node) BytesSent() map[string]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]uint64, len(n.traffic))
	for id, t := range n.traffic {
		out[id] = t.sent.Load()
	}
	return out
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

func (n *Node) resyncPending() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.needResync
}

func (n *Node) sendToMaster(master string, msg any) {
	n.mu.Lock()
	c := n.out[master]
	n.mu.Unlock()
	if c != nil {
		c.send(msg)
	}
}

func (n *Node) onFetch(c *conn, m *wire.Fetch) {
	n.mu.Lock()
	isMaster := n.master == n.cfg.NodeID
	n.mu.Unlock()
	if !isMaster {
		return
	}
	if !m.Snapshot {
		n.appMu.Lock()
		evs, ok := n.cfg.App.EventsSince(m.Since, fetchBatch)
		n.appMu.Unlock()
		if ok {
			if len(evs) > 0 {
				c.send(&wire.Events{MasterID: n.cfg.NodeID, Events: evs})
			}
			return
		}
	}
	n.appMu.Lock()
	idx, st, err := n.cfg.App.Snapshot()
	n.appMu.Unlock()
	if err != nil {
		n.log.Warn("snapshot for peer", "peer", c.peer, "err", err)
		return
	}
	c.send(&wire.Snapshot{MasterID: n.cfg.NodeID, LastIdx: idx, State: st})
}

func (n *Node) onSnapshot(m *wire.Snapshot) {
	n.mu.Lock()
	follow := m.MasterID == n.master && n.master != n.cfg.NodeID
	n.mu.Unlock()
	if !follow {
		return
	}
	n.appMu.Lock()
	err := n.cfg.App.Restore(m.LastIdx, m.State)
	n.appMu.Unlock()
	if err != nil {
		n.log.Warn("restore snapshot from master", "master", m.MasterID, "err", err)
		return
	}
	n.mu.Lock()
	if n.master == m.MasterID {
		n.needResync = false
	}
	n.mu.Unlock()
	n.log.Info("state restored from master", "master", m.MasterID, "lastIdx", m.LastIdx)
}
