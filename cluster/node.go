package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/internal/ident"
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
	// Listener accepts peer connections (from Transport.Listen); the node
	// owns and closes it.
	Listener net.Listener
	// Transport dials peers; nil is TCPTransport.
	Transport Transport
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
	// Clock is the wall clock the node stamps its probes and echoes with,
	// from which peers derive clock offsets (nil: time.Now; tests skew
	// it). Nothing else depends on agreeing clocks: the master orders
	// events.
	Clock func() time.Time
	// Heartbeat is the heartbeat/probe period (1 s); FailAfter is the
	// silence after which a member is gone (3 s).
	Heartbeat, FailAfter time.Duration
	Logger               *slog.Logger
	// OnHeartbeat, when set, is told of every heartbeat read from a peer:
	// the peer, its wall clock when it sent the heartbeat (Heartbeat.T1),
	// and ours when we read it. It runs on the link's read loop and must
	// return at once (tests and measurements of heartbeat delay).
	OnHeartbeat func(from string, sent, received time.Time)
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
// membership, elects the master and replicates events through it. Other
// protocols ride on its authenticated streams (HandleStream, DialStream).
type Node struct {
	cfg     Config
	log     *slog.Logger
	table   *Table
	streams streams

	appMu sync.Mutex // serialises every call into cfg.App

	// mu guards the fields below. Lock order: appMu before mu; never hold
	// mu while calling out (App, Transport, a conn's blocking I/O).
	mu           sync.Mutex
	out          map[string]*conn // outbound connection per peer node id
	dialing      map[string]bool  // addresses being dialled
	master       string
	term         uint64 // the election term of master (Elect)
	seq          uint64
	pending      []wire.RawEvent // local events waiting for a master link
	links        map[string]*linkStat
	traffic      map[string]*traffic   // per peer; kept across reconnects
	probes       map[string]*probeLink // outbound probe link per peer
	probeDialing map[string]bool
	beats        map[string]*conn // outbound heartbeat link per peer
	beatDialing  map[string]bool
	in           map[*conn]bool // inbound control links
	// lastDial rate-limits dials per address; addrPeer remembers which
	// node answered at an address (static peers come without an id).
	lastDial map[string]time.Time
	addrPeer map[string]string
	learned  map[string]PeerAddr // peers that dialled us: their advertised port
	// lastTick is when Run last ticked (only Run's goroutine uses it).
	lastTick time.Time
	// needResync is set when we follow a new master and cleared when its
	// snapshot arrives; until then its events are not applied.
	needResync bool
	resyncAt   time.Time // when we last asked the master for a snapshot
}

// Status is a node's view of the cluster, for the API.
type Status struct {
	NodeID              string   `json:"nodeId"`
	MasterID            string   `json:"masterId"`
	Term                uint64   `json:"term"`
	IsMaster            bool     `json:"isMaster"`
	Members             []Member `json:"members"`
	LastEventAppliedIdx int64    `json:"lastEventAppliedIdx"`
	StateHash           string   `json:"stateHash"`
	Links               []Link   `json:"links"`
}

// NewNode validates cfg. Run starts it.
func NewNode(cfg Config) (*Node, error) {
	if err := ident.ValidNodeID(cfg.NodeID); err != nil {
		return nil, fmt.Errorf("cluster node: %w", err)
	}
	if cfg.Listener == nil || cfg.ServerTLS == nil || cfg.ClientTLS == nil || cfg.PeerID == nil || cfg.App == nil || cfg.Peers == nil {
		return nil, errors.New("cluster node: listener, TLS configs, PeerID, Peers and App are required")
	}
	if cfg.Transport == nil {
		cfg.Transport = TCPTransport{}
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
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
		lastDial:     map[string]time.Time{},
		probes:       map[string]*probeLink{},
		probeDialing: map[string]bool{},
		beats:        map[string]*conn{},
		beatDialing:  map[string]bool{},
		in:           map[*conn]bool{},
		addrPeer:     map[string]string{},
		learned:      map[string]PeerAddr{},
	}
	n.master = cfg.NodeID // alone, a node is its own master
	return n, nil
}

// Run serves peers until ctx ends. It returns once every goroutine it
// started, stream handlers included, has returned.
// It returns an error, before ctx ends, when peer links can no longer be
// accepted (the listener failed).
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
		for _, c := range n.beats {
			c.close()
		}
		n.mu.Unlock()
		wg.Wait()
	}()
	acceptErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		acceptErr <- n.acceptLoop(ctx, &wg)
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
		case err := <-acceptErr:
			// A node that can no longer accept links is not a member,
			// whatever its outbound links say: stop, and say why.
			return err
		case <-t.C:
		}
	}
}

// ID returns this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Master returns the id of the master this node follows (its own id when
// it is the master).
func (n *Node) Master() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.master
}

// Members returns this node and every member heard from recently, sorted
// by id.
func (n *Node) Members() []Member { return n.table.Alive() }

// IsMember reports whether id is this node or a member heard from within
// FailAfter.
func (n *Node) IsMember(id string) bool { return n.table.Has(id) }

// Addr returns the address peer links are accepted on.
func (n *Node) Addr() net.Addr { return n.cfg.Listener.Addr() }

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	n.appMu.Lock()
	idx, hash := n.cfg.App.LastIdx(), n.cfg.App.StateHash()
	n.appMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	return Status{NodeID: n.cfg.NodeID, MasterID: n.master, Term: n.term, IsMaster: n.master == n.cfg.NodeID,
		Members: n.table.Alive(), LastEventAppliedIdx: idx, StateHash: hash, Links: n.linksLocked()}
}
