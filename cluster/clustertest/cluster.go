package clustertest

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
)

// Test timing: fast enough that a test forms a cluster in well under a
// second, slow enough for -race on a loaded machine.
const (
	Heartbeat = 100 * time.Millisecond
	FailAfter = 500 * time.Millisecond
)

// Options configure StartCluster. The zero value starts nodes on a new
// in-memory network with a new CA.
type Options struct {
	// Network carries the nodes' links; nodes of several StartCluster
	// calls reach each other when they share it. Nil: a new one.
	Network *Network
	// TCP runs the nodes over loopback TCP instead (Network is unused).
	TCP bool
	// CA issues the nodes' certificates; nil: a new one.
	CA *CA
	// StartedAt is each node's start time, which the election prefers
	// (earliest wins); nil: now, one second apart in id order, so the
	// first node is the master.
	StartedAt []time.Time
	// FailAfter, when set, replaces the test FailAfter.
	FailAfter time.Duration
	// Clocks, when set, are the nodes' clocks (cluster.Config.Clock; nil
	// entries: time.Now).
	Clocks []func() time.Time
	// DialResult, when set, is each node's cluster.Config.DialResult.
	DialResult func(node string, p cluster.PeerAddr, err error)
	// OnHeartbeat, when set, is each node's cluster.Config.OnHeartbeat.
	OnHeartbeat func(node, from string, sent, received time.Time)
}

// Node is one running test node.
type Node struct {
	ID   string
	Node *cluster.Node
	App  *App
	// Addr is where the node accepts peer links.
	Addr string

	peers  atomic.Pointer[[]cluster.PeerAddr]
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// SetPeers replaces the addresses the node keeps links to.
func (n *Node) SetPeers(p []cluster.PeerAddr) { n.peers.Store(&p) }

// Stop stops the node and waits for its Run to return (it fails the test
// if Run does not return within 10 s). Test cleanup stops every node.
func (n *Node) Stop(tb testing.TB) {
	tb.Helper()
	n.once.Do(func() {
		n.cancel()
		select {
		case err := <-n.done:
			if err != nil {
				tb.Errorf("node %s: Run: %v", n.ID, err)
			}
		case <-time.After(10 * time.Second):
			tb.Errorf("node %s did not stop", n.ID)
		}
	})
}

// StartCluster starts nodes with ids, each knowing every node's address
// (a static peer list), and stops them when the test ends.
func StartCluster(tb testing.TB, opts Options, ids ...string) []*Node {
	tb.Helper()
	if opts.Network == nil {
		opts.Network = NewNetwork()
	}
	if opts.CA == nil {
		opts.CA = NewCA(tb)
	}
	now := time.Now()
	var addrs []cluster.PeerAddr
	var lns []net.Listener
	var trs []cluster.Transport
	for _, id := range ids {
		var tr cluster.Transport = opts.Network.Host(id)
		at := ""
		if opts.TCP {
			tr, at = cluster.TCPTransport{}, "127.0.0.1:0"
		}
		ln, err := tr.Listen(at)
		if err != nil {
			tb.Fatal(err)
		}
		lns, trs = append(lns, ln), append(trs, tr)
		addrs = append(addrs, cluster.PeerAddr{Addr: ln.Addr().String()})
	}
	var nodes []*Node
	for i, id := range ids {
		started := now.Add(time.Duration(i) * time.Second)
		if opts.StartedAt != nil {
			started = opts.StartedAt[i]
		}
		n := &Node{ID: id, App: &App{}, Addr: addrs[i].Addr, done: make(chan error, 1)}
		n.SetPeers(addrs)
		_, ps, _ := net.SplitHostPort(n.Addr)
		port, _ := strconv.Atoi(ps)
		srv, cli := opts.CA.TLS(tb, id)
		cfg := cluster.Config{NodeID: id, StartedAt: started, Listener: lns[i], Transport: trs[i],
			PeerPort: port, ServerTLS: srv, ClientTLS: cli, PeerID: PeerID, App: n.App,
			Peers:     func() []cluster.PeerAddr { return *n.peers.Load() },
			Heartbeat: Heartbeat, FailAfter: FailAfter, Logger: Logger(id)}
		if opts.FailAfter > 0 {
			cfg.FailAfter = opts.FailAfter
		}
		if opts.Clocks != nil {
			cfg.Clock = opts.Clocks[i]
		}
		if opts.DialResult != nil {
			cfg.DialResult = func(p cluster.PeerAddr, err error) { opts.DialResult(id, p, err) }
		}
		if opts.OnHeartbeat != nil {
			cfg.OnHeartbeat = func(from string, sent, received time.Time) { opts.OnHeartbeat(id, from, sent, received) }
		}
		node, err := cluster.NewNode(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		n.Node, n.cancel = node, cancel
		go func() { n.done <- node.Run(ctx) }()
		tb.Cleanup(func() { n.Stop(tb) })
		nodes = append(nodes, n)
	}
	return nodes
}

// Converged reports whether all nodes agree on the master, the members
// (all of nodes), the last event index and the state hash.
func Converged(nodes []*Node) bool {
	first := nodes[0].Node.Status()
	for _, n := range nodes {
		s := n.Node.Status()
		if s.MasterID != first.MasterID || s.LastEventAppliedIdx != first.LastEventAppliedIdx || s.StateHash != first.StateHash || len(s.Members) != len(nodes) {
			return false
		}
	}
	return true
}

// Logger is a node's logger: silent unless ORRERY_TEST_LOG is set, then
// debug on stderr.
func Logger(id string) *slog.Logger {
	if os.Getenv("ORRERY_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
}
