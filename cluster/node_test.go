package cluster

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// memApp is an in-memory Application: its state is the list of applied
// events. A unit-test fake of the agent's store.
type memApp struct {
	mu      sync.Mutex
	evs     []wire.IndexedEvent
	base    int64 // idx of evs[0]; after Restore the list restarts
	hashAcc string
	gone    []string
	masters []string
}

func (a *memApp) LastIdx() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.base + int64(len(a.evs)) - 1
}

func (a *memApp) Apply(evs []wire.IndexedEvent) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range evs {
		if want := a.base + int64(len(a.evs)); e.Idx != want {
			return fmt.Errorf("got %d want %d", e.Idx, want)
		}
		a.evs = append(a.evs, e)
		sum := sha256.Sum256([]byte(a.hashAcc + e.Type + string(e.Event)))
		a.hashAcc = hex.EncodeToString(sum[:])
	}
	return nil
}

func (a *memApp) EventsSince(since int64, max int) ([]wire.IndexedEvent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if since < a.base {
		return nil, false
	}
	i := since - a.base
	if i >= int64(len(a.evs)) {
		return nil, true
	}
	out := a.evs[i:]
	if len(out) > max {
		out = out[:max]
	}
	return append([]wire.IndexedEvent(nil), out...), true
}

type memSnap struct {
	Hash string `json:"hash"`
}

func (a *memApp) Snapshot() (int64, json.RawMessage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, err := json.Marshal(memSnap{a.hashAcc})
	return a.base + int64(len(a.evs)) - 1, b, err
}

func (a *memApp) Restore(idx int64, raw json.RawMessage) error {
	var s memSnap
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs, a.base, a.hashAcc = nil, idx+1, s.Hash
	return nil
}

func (a *memApp) StateHash() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hashAcc
}

func (a *memApp) MasterChanged(m string, self bool) {
	a.mu.Lock()
	a.masters = append(a.masters, m)
	a.mu.Unlock()
}

func (a *memApp) MemberGone(id string) {
	a.mu.Lock()
	a.gone = append(a.gone, id)
	a.mu.Unlock()
}

// testCA issues node certificates for mutual TLS, like cluster/auth does
// from the cluster key (which has its own tests).
type testCA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert, priv, pool}
}

func (ca *testCA) configs(t *testing.T, id string) (server, client *tls.Config) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: id},
		DNSNames: []string{"orrery-peer"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf},
		RootCAs: ca.pool, ServerName: "orrery-peer"}
	return server, client
}

func peerID(cs tls.ConnectionState) (string, error) {
	if len(cs.VerifiedChains) == 0 {
		return "", errors.New("no verified chain")
	}
	return cs.VerifiedChains[0][0].Subject.CommonName, nil
}

type testNode struct {
	once   sync.Once
	peers  atomic.Pointer[[]PeerAddr]
	id     string
	node   *Node
	app    *memApp
	addr   string
	cancel context.CancelFunc
	onDial atomic.Pointer[func(PeerAddr, error)]
	done   chan error

	hookMu sync.Mutex
	traced []string // "from:type:task" of trace messages received (OnTrace)
	rings  []string // "bench:hops:err" of this node's ring ranks (RingRun)
}

func (tn *testNode) onTrace(from string, msg any) {
	tn.hookMu.Lock()
	defer tn.hookMu.Unlock()
	switch m := msg.(type) {
	case *wire.TraceTask:
		tn.traced = append(tn.traced, from+":task:"+m.Task)
	case *wire.TraceChunk:
		tn.traced = append(tn.traced, fmt.Sprintf("%s:chunk:%s:%d", from, m.Task, m.Rank))
	}
}

func (tn *testNode) ringRun(start wire.RingStart) func(*wire.RingReport, error) {
	if start.NoTrace {
		return nil
	}
	return func(rep *wire.RingReport, err error) {
		tn.hookMu.Lock()
		defer tn.hookMu.Unlock()
		tn.rings = append(tn.rings, fmt.Sprintf("%s:%d:%v", start.Bench, len(rep.Hops), err))
	}
}

// onStream echoes a stream's first line back, prefixed by who it came from.
func (tn *testNode) onStream(peer, purpose, id string, c net.Conn) {
	go func() {
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%s %s%s %s", peer, purpose, id, line)
	}()
}

func (tn *testNode) hooks() (traced, rings []string) {
	tn.hookMu.Lock()
	defer tn.hookMu.Unlock()
	return append([]string(nil), tn.traced...), append([]string(nil), tn.rings...)
}

// cluster starts nodes that all know every address (a static peer list).
func startCluster(t *testing.T, ca *testCA, ids []string, started []time.Time) []*testNode {
	t.Helper()
	var addrs []PeerAddr
	var lns []net.Listener
	for range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, PeerAddr{Addr: ln.Addr().String()})
	}
	var nodes []*testNode
	for i, id := range ids {
		srv, cli := ca.configs(t, id)
		app := &memApp{base: 0}
		tn := &testNode{id: id, app: app, addr: lns[i].Addr().String(), done: make(chan error, 1)}
		tn.setPeers(addrs)
		n, err := NewNode(Config{NodeID: id, StartedAt: started[i], Listener: lns[i], PeerPort: lns[i].Addr().(*net.TCPAddr).Port, ServerTLS: srv, ClientTLS: cli,
			PeerID: peerID, Peers: func() []PeerAddr { return *tn.peers.Load() }, App: app,
			DialResult: func(p PeerAddr, err error) {
				if f := tn.onDial.Load(); f != nil {
					(*f)(p, err)
				}
			},
			Heartbeat: 100 * time.Millisecond, FailAfter: 500 * time.Millisecond, Logger: testLogger(t, id),
			OnTrace: tn.onTrace, RingRun: tn.ringRun, OnStream: tn.onStream})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		tn.node, tn.cancel = n, cancel
		go func() { tn.done <- n.Run(ctx) }()
		t.Cleanup(func() { tn.stop(t) })
		nodes = append(nodes, tn)
	}
	return nodes
}

func (tn *testNode) stop(t *testing.T) {
	tn.once.Do(func() {
		tn.cancel()
		select {
		case <-tn.done:
		case <-time.After(10 * time.Second):
			t.Errorf("node %s did not stop", tn.id)
		}
	})
}

func (tn *testNode) setPeers(p []PeerAddr) { tn.peers.Store(&p) }

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func converged(nodes []*testNode) bool {
	first := nodes[0].node.Status()
	for _, n := range nodes[1:] {
		s := n.node.Status()
		if s.MasterID != first.MasterID || s.LastEventAppliedIdx != first.LastEventAppliedIdx || s.StateHash != first.StateHash || len(s.Members) != len(nodes) {
			return false
		}
	}
	return true
}

func TestNodesElectReplicateAndFailOver(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	nodes := startCluster(t, ca, []string{"a", "b", "c"}, []time.Time{now.Add(2 * time.Second), now, now.Add(time.Second)})

	waitUntil(t, "b elected by everyone", 10*time.Second, func() bool {
		for _, n := range nodes {
			if st := n.node.Status(); st.MasterID != "b" || len(st.Members) != 3 {
				return false
			}
		}
		return true
	})
	// Every node publishes; all must apply the same events in the same order.
	for i := 0; i < 20; i++ {
		for _, n := range nodes {
			ev, _ := json.Marshal(map[string]any{"from": n.id, "i": i})
			if err := n.node.Publish(wire.RawEvent{Type: "T", Event: ev}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUntil(t, "60 events everywhere, same hash", 10*time.Second, func() bool {
		return converged(nodes) && nodes[0].node.Status().LastEventAppliedIdx >= 59
	})
	waitUntil(t, "probes to both peers from every node", 5*time.Second, func() bool {
		for _, n := range nodes {
			links := n.node.Links()
			if len(links) != 2 || links[0].RTTEWMA <= 0 || links[0].BytesSent == 0 || links[0].BytesRecv == 0 || links[0].LocalAddr == "" || links[0].Probes < 5 {
				return false
			}
		}
		return true
	})

	// Loopback loses nothing: every probe counted was answered.
	for _, n := range nodes {
		for _, l := range n.node.Links() {
			if l.LossPct != 0 {
				t.Errorf("%s→%s: %.1f %% loss on loopback over %d probes", n.id, l.PeerID, l.LossPct, l.Probes)
			}
		}
	}

	// Worker a dies: the others sweep it, and the master reports it gone.
	nodes[0].stop(t)
	start := time.Now()
	waitUntil(t, "a gone on b and c", 5*time.Second, func() bool {
		return len(nodes[1].node.Status().Members) == 2 && len(nodes[2].node.Status().Members) == 2
	})
	t.Logf("worker failure detected in %v (fail-after 500ms)", time.Since(start))
	waitUntil(t, "master told a is gone", 2*time.Second, func() bool {
		nodes[1].app.mu.Lock()
		defer nodes[1].app.mu.Unlock()
		return len(nodes[1].app.gone) == 1 && nodes[1].app.gone[0] == "a"
	})

	// Master b dies: c takes over and keeps indexing.
	nodes[1].stop(t)
	waitUntil(t, "c is master", 5*time.Second, func() bool {
		st := nodes[2].node.Status()
		return st.IsMaster && len(st.Members) == 1
	})
	before := nodes[2].node.Status().LastEventAppliedIdx
	nodes[2].node.Publish(wire.RawEvent{Type: "T", Event: []byte(`{"after":"failover"}`)})
	if got := nodes[2].node.Status().LastEventAppliedIdx; got != before+1 {
		t.Errorf("new master indexed to %d, want %d", got, before+1)
	}
}

func TestLateJoinerResyncsFromMaster(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	nodes := startCluster(t, ca, []string{"m", "w"}, []time.Time{now, now.Add(time.Second)})
	waitUntil(t, "pair formed", 10*time.Second, func() bool { return converged(nodes) })
	for i := 0; i < 10; i++ {
		nodes[0].node.Publish(wire.RawEvent{Type: "T", Event: []byte(fmt.Sprint(i))})
	}
	waitUntil(t, "converged", 10*time.Second, func() bool {
		return converged(nodes) && nodes[1].node.Status().LastEventAppliedIdx >= 9
	})
	// A node with its own solo history joins: it must adopt the master's.
	late := startCluster(t, ca, []string{"x"}, []time.Time{now.Add(time.Hour)})[0]
	for i := 0; i < 5; i++ {
		late.node.Publish(wire.RawEvent{Type: "Solo", Event: []byte(fmt.Sprint(i))})
	}
	late.setPeers([]PeerAddr{{Addr: nodes[0].addr}}) // only m: it must learn w from m
	all := append(nodes, late)
	waitUntil(t, "late joiner converged", 10*time.Second, func() bool { return converged(all) })
	nodes[0].node.Publish(wire.RawEvent{Type: "T", Event: []byte(`"after-join"`)})
	waitUntil(t, "event after join everywhere", 10*time.Second, func() bool {
		return converged(all) && late.node.Status().LastEventAppliedIdx >= 10
	})
}

func TestPeerWithOtherCAIsRefused(t *testing.T) {
	now := time.Now()
	good := startCluster(t, newTestCA(t), []string{"g"}, []time.Time{now})[0]
	bad := startCluster(t, newTestCA(t), []string{"b"}, []time.Time{now.Add(-time.Hour)})[0]
	var mu sync.Mutex
	var dialErr error
	onDial := func(p PeerAddr, err error) {
		if p.Addr == good.addr {
			mu.Lock()
			dialErr = err
			mu.Unlock()
		}
	}
	bad.onDial.Store(&onDial)
	bad.setPeers([]PeerAddr{{Addr: good.addr}})
	waitUntil(t, "a refused dial", 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return dialErr != nil })
	for i := 0; i < 5; i++ {
		if len(good.node.Status().Members) != 1 || len(bad.node.Status().Members) != 1 {
			t.Fatal("a node with another CA joined")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var ua x509.UnknownAuthorityError
	mu.Lock()
	defer mu.Unlock()
	if !errors.As(dialErr, &ua) {
		t.Errorf("dial error = %v, want an unknown-authority error", dialErr)
	}
}

func testLogger(t *testing.T, id string) *slog.Logger {
	if os.Getenv("ORRERY_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
}

func TestRingBench(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	nodes := startCluster(t, ca, []string{"a", "b", "c"}, []time.Time{now, now.Add(time.Second), now.Add(2 * time.Second)})
	waitUntil(t, "3 members everywhere", 10*time.Second, func() bool { return converged(nodes) })
	waitUntil(t, "b probing both peers", 10*time.Second, func() bool { return len(nodes[1].node.Links()) == 2 })
	res, err := nodes[1].node.RingBench(context.Background(), 1<<20, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	// Every rank told RingRun about its 3 hops before the result came back
	// (the members report after their hook ran).
	for _, n := range nodes {
		if _, rings := n.hooks(); len(rings) != 1 || rings[0] != res.Bench+":3:<nil>" {
			t.Errorf("%s: ring hook calls %v", n.id, rings)
		}
	}
	if len(res.Order) != 3 || res.Order[0] != "b" || len(res.Hops) != 3 || len(res.RoundMs) != 3 {
		t.Fatalf("result = %+v", res)
	}
	want := map[string]string{"b": res.Order[1], res.Order[1]: res.Order[2], res.Order[2]: "b"}
	for _, h := range res.Hops {
		if want[h.From] != h.To || h.LatencyMsMin <= 0 || h.LatencyMsMin > h.LatencyMsAvg || h.LatencyMsAvg > h.LatencyMsMax || h.ThroughputMBps <= 0 {
			t.Errorf("hop %+v", h)
		}
	}
	t.Logf("ring of 3, 1 MiB × 3: %+v", res.Hops)
	// Rank-link bytes are counted as Orrery traffic with each peer.
	var sent, recv uint64
	for _, l := range nodes[1].node.Links() {
		sent, recv = max(sent, l.BytesSent), max(recv, l.BytesRecv)
	}
	if sent < 3<<20 || recv < 3<<20 {
		t.Errorf("largest per-peer counters: sent %d, received %d; want ≥ 3 MiB each", sent, recv)
	}
	// A second run works (ids do not collide; links are cleaned up).
	// NoTrace reaches the members: no hook call.
	if _, err := nodes[0].node.RingBench(context.Background(), 1000, 1, true); err != nil {
		t.Errorf("second run: %v", err)
	}
	for _, n := range nodes {
		if _, rings := n.hooks(); len(rings) != 1 {
			t.Errorf("%s: untraced run called the ring hook: %v", n.id, rings)
		}
	}
	// Bad parameters are refused before anything is sent.
	if _, err := nodes[0].node.RingBench(context.Background(), 0, 1, false); err == nil {
		t.Error("a 0-byte payload was accepted")
	}
}

// Trace messages go to the master, from other members over the control
// link and from the master itself directly.
func TestShipTrace(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	nodes := startCluster(t, ca, []string{"a", "b", "c"}, []time.Time{now, now.Add(time.Second), now.Add(2 * time.Second)})
	waitUntil(t, "3 members everywhere", 10*time.Second, func() bool { return converged(nodes) })
	master := nodes[0].node.Status().MasterID
	if master != "a" {
		t.Fatalf("master %s, want the longest-running a", master)
	}
	ctx := context.Background()
	// More chunks than the send queue holds: ShipTrace paces them.
	const chunks = 2 * sendQueueLen
	for i := range chunks {
		got, err := nodes[2].node.ShipTrace(ctx, &wire.TraceChunk{Task: "t1", Rank: 2, Seq: i, Data: []byte(`{"spans":[]}`)})
		if err != nil || got != "a" {
			t.Fatalf("chunk %d: master %q, %v", i, got, err)
		}
	}
	if _, err := nodes[0].node.ShipTrace(ctx, &wire.TraceTask{Task: "t1", Ranks: []wire.TraceRank{{Rank: 0, Node: "a"}}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every chunk on the master", 10*time.Second, func() bool {
		traced, _ := nodes[0].hooks()
		return len(traced) == chunks+1
	})
	traced, _ := nodes[0].hooks()
	if !slices.Contains(traced, "a:task:t1") || !slices.Contains(traced, "c:chunk:t1:2") {
		t.Errorf("the master's own announcement or c's chunks are missing: %v", traced[:3])
	}
	for _, n := range nodes[1:] {
		if traced, _ := n.hooks(); len(traced) != 0 {
			t.Errorf("%s (not master) got trace messages: %v", n.id, traced)
		}
	}
	if _, err := nodes[1].node.ShipTrace(ctx, &wire.TraceChunk{Task: "../x", Data: []byte(`{}`)}); err == nil {
		t.Error("an invalid chunk was shipped")
	}
	if _, err := nodes[1].node.ShipTrace(ctx, &wire.Fetch{}); err == nil {
		t.Error("a non-trace message was shipped")
	}
}

// A stream link reaches the peer's OnStream authenticated (the peer sees
// our id), and its bytes count as traffic with that peer.
func TestStream(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	nodes := startCluster(t, ca, []string{"a", "b"}, []time.Time{now, now.Add(time.Second)})
	waitUntil(t, "2 members", 10*time.Second, func() bool { return converged(nodes) })
	before := nodes[0].node.BytesSent()["b"]
	c, err := nodes[0].node.DialStream(context.Background(), "b", wire.StreamHTTP, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "hello\n")
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "a http hello\n" {
		t.Fatalf("echo %q, %v", got, err)
	}
	if after := nodes[0].node.BytesSent()["b"]; after < before+6 {
		t.Errorf("bytes sent to b: %d then %d", before, after)
	}
	r, err := nodes[0].node.DialStream(context.Background(), "b", wire.StreamRank, "inst-1-r1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fmt.Fprintf(r, "x\n")
	if got, err := bufio.NewReader(r).ReadString('\n'); err != nil || got != "a rankinst-1-r1 x\n" {
		t.Fatalf("rank stream echo %q, %v", got, err)
	}
	if _, err := nodes[0].node.DialStream(context.Background(), "nobody", wire.StreamHTTP, ""); err == nil {
		t.Error("a stream to a non-member was opened")
	}
}
