package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/identity"
	"github.com/orrery-cluster/orrery/agent/instance"
	"github.com/orrery-cluster/orrery/agent/ownership"
	"github.com/orrery-cluster/orrery/agent/peerapi"
	"github.com/orrery-cluster/orrery/agent/pull"
	"github.com/orrery-cluster/orrery/agent/replica"
	"github.com/orrery-cluster/orrery/agent/shard"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/agent/tracecollect"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/cluster/ringbench"
	"github.com/orrery-cluster/orrery/engine/modelstore"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Agent is one running node: the parts New wires, which Start runs.
type Agent struct {
	cfg Config
	log *slog.Logger
	// idMu guards identity's Speed and GPUs, set once measured.
	idMu     sync.Mutex
	identity state.NodeIdentity
	store    *state.Store
	seq      state.Sequencer
	ln       net.Listener // API
	pln      net.Listener // peer links; owned by node once Run starts
	node     *cluster.Node
	disc     *discovery.Discovery
	replica  *replica.Replica
	// ledger records what this node owns and reconciles the state with
	// it; it is the node's Sequencer (seq).
	ledger *ownership.Ledger
	traces *tracestore.Store
	// tracer ships this node's spans and merges traces on the master;
	// ring runs the ring benchmark.
	tracer    *tracecollect.Tracer
	ring      *ringbench.Bench
	exe       string // the orrery binary runners (and the speed benchmark) run
	sup       *supervisor.Supervisor
	relay     *supervisor.Relay
	instances *instance.Manager
	pulls     *pull.Puller
	shards    *shard.Cache
	peerLn    *peerapi.Listener // stream links from peers, for the peer API
	peerHTTP  *http.Client      // to other nodes' peer APIs
	// apiToken is what requests from other machines must present ("":
	// the API listens on loopback only); tokenMade, made at this start.
	apiToken  string
	tokenMade bool

	// run is set by Start: the running services.
	run *running
}

// running is the state of a started agent.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the first failure; read after done is closed
	// node is the cluster node's own run: it outlives the other services
	// so that shutdown can still ship traces through it.
	node nodeRun
}

// nodeRun is the cluster node running on a context of its own.
type nodeRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Node.Run's result; read after done is closed
}

// keys is what New loads from the data dir before anything listens.
type keys struct {
	id   state.NodeIdentity
	key  auth.Key
	cert *auth.Identity
}

// New loads the identity, prepares the data dir and binds the API and peer
// listeners, so that a busy port fails here rather than later. Start runs
// the services.
func New(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "models"), 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	traces, err := tracestore.Open(tracestore.Config{Dir: filepath.Join(cfg.DataDir, "traces"), Logger: cfg.Logger})
	if err != nil {
		return nil, err // tracestore.Open says "trace store: …"
	}
	k, err := loadKeys(cfg)
	if err != nil {
		return nil, err
	}
	// The static peers orrery join stored, beside --peer's.
	saved, err := discovery.LoadPeers(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("static peers: %w", err)
	}
	for _, p := range saved {
		if !slices.Contains(cfg.Peers, p) {
			cfg.Peers = append(cfg.Peers, p)
		}
	}
	if len(saved) > 0 {
		cfg.Logger.Info("static peers from the data dir", "file", filepath.Join(cfg.DataDir, discovery.PeersFile), "peers", saved)
	}
	exe := cfg.RunnerExe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%w: %v", errNoExe, err)
		}
	}
	tok, made, err := apiToken(cfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("nodeId", k.id.NodeID), identity: k.id, traces: traces, apiToken: tok, tokenMade: made}
	if err := a.listen(); err != nil {
		return nil, err
	}
	if err := a.wire(k, exe); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func loadKeys(cfg Config) (keys, error) {
	id, err := identity.Load(identity.Options{DataDir: cfg.DataDir, AgentVersion: cfg.Version, Logger: cfg.Logger})
	if err != nil {
		return keys{}, fmt.Errorf("identity: %w", err)
	}
	key, src, err := auth.LoadOrCreateKey(cfg.DataDir, cfg.Getenv)
	if err != nil {
		return keys{}, fmt.Errorf("cluster key: %w", err)
	}
	cfg.Logger.Info("cluster key", "source", string(src), "fingerprint", key.Fingerprint())
	cert, err := auth.NewNodeCert(key, id.NodeID, time.Now())
	if err != nil {
		return keys{}, fmt.Errorf("node certificate: %w", err)
	}
	return keys{id: id, key: key, cert: cert}, nil
}

// listen binds the API and peer listeners.
func (a *Agent) listen() error {
	ln, err := net.Listen("tcp", a.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("api listen on %s: %w", a.cfg.APIAddr, err)
	}
	pln, err := net.Listen("tcp", a.cfg.PeerAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("peer listen on %s: %w", a.cfg.PeerAddr, err)
	}
	a.ln, a.pln = ln, pln
	return nil
}

// wire builds the node's parts, each given what it needs.
func (a *Agent) wire(k keys, exe string) error {
	cfg, id := a.cfg, k.id.NodeID
	peerPort := a.pln.Addr().(*net.TCPAddr).Port
	disc, err := discovery.New(discovery.Config{
		NodeID: id, Version: cfg.Version, KeyFP: k.key.Fingerprint(), PeerPort: peerPort,
		MDNS: cfg.MDNS, Static: cfg.Peers, LoopbackDir: cfg.LoopbackDir, Logger: cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	a.disc = disc
	a.store = state.NewStore(state.NewLog(state.DefaultLogRetention), state.NewMemoryHistory(state.DefaultHistoryWindow))
	a.replica = replica.New(a.store)
	a.peerLn = peerapi.NewListener(a.pln.Addr())
	a.peerHTTP = peerapi.NewClient(func(ctx context.Context, node string) (net.Conn, error) {
		return a.node.DialStream(ctx, node, cluster.PurposeHTTP, "")
	})
	a.wireServing(exe, k.key)
	a.exe = exe
	node, err := cluster.NewNode(cluster.Config{
		NodeID: id, StartedAt: k.id.StartedAt, Version: cfg.Version,
		Listener: a.pln, PeerPort: peerPort,
		ServerTLS: k.cert.ServerConfig(), ClientTLS: k.cert.ClientConfig(), PeerID: auth.PeerNodeID,
		Peers: func() []cluster.PeerAddr { return peerAddrs(disc.Peers()) },
		DialResult: func(p cluster.PeerAddr, err error) {
			disc.ReportDial(p.NodeID, p.Addr, err, err != nil && auth.IsKeyMismatch(err))
		},
		App: a.replica, Heartbeat: cfg.Heartbeat, FailAfter: cfg.FailAfter, Logger: cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	a.node = node
	if a.ledger, err = ownership.New(ownership.Config{Self: id, Path: filepath.Join(cfg.DataDir, ownership.FileName),
		Store: a.store, Sequence: replica.Sequencer{Node: node}.Publish, Logger: a.log}); err != nil {
		return fmt.Errorf("instances: %w", err)
	}
	a.seq = a.ledger
	node.HandleStream(cluster.PurposeHTTP, func(_ context.Context, _, _ string, c net.Conn) { a.peerLn.Offer(c) })
	node.HandleStream(cluster.PurposeRank, func(ctx context.Context, peer, id string, c net.Conn) {
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		a.relay.Accept(peer, id, c)
	})
	a.tracer = tracecollect.NewTracer(tracecollect.TracerConfig{Self: id, NodeName: k.id.FriendlyName,
		Node: node, Links: node.Links, BytesSent: node.BytesSent, State: a.store.State, History: a.store.History(),
		Traces: a.traces, MergeTimeout: cfg.TraceMergeTimeout, SpillDir: filepath.Join(cfg.DataDir, "trace-spill"), Logger: a.log})
	a.ring = ringbench.New(ringbench.Config{Node: node, OnRank: a.tracer.RingRank, Logger: a.log})
	// Whoever becomes master must know what every node owns: the new
	// master asserts its own part at once, a follower once it has taken
	// the new master's snapshot (OnRestore). The new master also gets the
	// trace data its predecessor may have lost. The master turns failure
	// detection into state (OnGone).
	a.replica.OnMaster = func(_ string, self bool) {
		if self {
			a.ledger.Kick("became master")
		}
		a.tracer.MasterChanged()
	}
	a.replica.OnRestore = func() { a.ledger.Kick("snapshot restored") }
	a.replica.OnGone = func(gone string) {
		if err := a.seq.Publish(state.NodeGone{NodeID: gone}); err != nil {
			a.log.Warn("publish node gone", "node", gone, "err", err)
		}
	}
	return nil
}

// wireServing builds the model-serving parts: the runner supervisor and
// its rank-link relay, the shard cache and the instance manager; key
// derives each tensor-parallel instance's direct-link secret.
func (a *Agent) wireServing(exe string, key auth.Key) {
	cfg, id := a.cfg, a.identity.NodeID
	publish := func(ev state.Event) error { return a.seq.Publish(ev) }
	models := &modelstore.Scanner{Dirs: cfg.modelDirs()}
	bind, _ := a.directHost()
	a.sup = supervisor.New(supervisor.Config{NodeID: id, NodeName: a.identity.FriendlyName, Exe: exe,
		DirectHost: bind, DirectPorts: cfg.DirectPorts, LinkSecret: func(instanceID string) []byte { return key.Derive("rank-links/" + instanceID) },
		AgentAPI: loopbackOf(a.ln.Addr()), LogDir: filepath.Join(cfg.DataDir, "logs"), Threads: cfg.RunnerThreads, DraftThreads: cfg.RunnerDraftThreads, ContextShift: cfg.ContextShift,
		GPULayers: cfg.GPULayers, NoGPU: cfg.NoGPU, GPUSoftware: cfg.GPUSoftware, GPUMemory: cfg.GPUMemory,
		ContextLen: cfg.ContextLen, DraftFile: func(id string) (string, error) { return localModel(models, id) }, ModelFile: func(ctx context.Context, in state.Instance, rank int, p func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
			return a.shards.ModelFile(ctx, in, rank, p)
		},
		Publish: publish, Logger: a.log,
		// The ledger and the node are wired after the supervisor.
		Owns:  func(id string) bool { return a.ledger.Owns(id) },
		Alive: func(id string) bool { return a.node.IsMember(id) },
		OnLoaded: func(in state.Instance, rank int, spans []trace.Span, counters []trace.CounterSample) {
			a.tracer.Loaded(in, rank, spans, counters)
		}})
	a.pulls = newPuller(cfg, id, publish, func() { a.instances.PublishModels() }, a.log)
	a.instances = instance.New(instance.Config{Self: id, Store: a.store, Publish: publish, Models: models,
		Runners: a.sup, Peer: a.peerHTTP, ContextLen: cfg.ContextLen, RAMLimit: cfg.RAMLimit, DirectLinks: cfg.DirectLinks, KeepAlive: &cfg.KeepAlive, Parallel: cfg.Parallel, Logger: a.log,
		Sources: a.pulls, Owned: func() []state.Instance { return a.ledger.Instances() }, // the ledger is wired later
		ShipTrace: func(task, kind string, spans []trace.Span, counters []trace.CounterSample, ranks []state.ShardRange, errText string) {
			a.tracer.ShipTask(task, kind, spans, counters, ranks, errText)
		}})
	a.shards = shard.New(shard.Config{Dir: filepath.Join(cfg.DataDir, "shards"), Self: id, Models: models,
		Peer: a.peerHTTP, State: a.store.State, Holder: a.instances.PickNode, Puller: a.pulls, Stall: cfg.DownloadIdle, Logger: a.log})
	a.relay = a.sup.Relay(supervisor.RelayConfig{Self: id, State: a.store.State,
		ShipRank: func(task string, rank int, spans []trace.Span, counters []trace.CounterSample, ranks []state.ShardRange) {
			a.tracer.ShipRank(task, rank, spans, counters, ranks)
		},
		DialPeer: func(ctx context.Context, node, streamID string) (net.Conn, error) {
			return a.node.DialStream(ctx, node, cluster.PurposeRank, streamID)
		},
		PeerHost: a.peerHost})
}

// directHost is the host a tensor-parallel runner's direct-link listener
// binds (the peer address's), and the host this node's own runners dial
// it at; "" when direct links are off.
func (a *Agent) directHost() (bind, local string) {
	if !a.cfg.DirectLinks {
		return "", ""
	}
	host, _, err := net.SplitHostPort(a.cfg.PeerAddr)
	if err != nil {
		return "", ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return host, "127.0.0.1"
	}
	return host, host
}

// peerLinks are the node's links to its peers, their traffic counting
// that of this node's tensor-parallel runners on direct links, which the
// peer links do not carry.
func (a *Agent) peerLinks() []cluster.Link {
	ls := a.node.Links()
	direct := a.sup.DirectBytes()
	for i := range ls {
		if d, ok := direct[ls[i].PeerID]; ok {
			ls[i].BytesSent += d[0]
			ls[i].BytesRecv += d[1]
		}
	}
	return ls
}

// peerHost is where this node reaches node: its own direct host, or the
// host of its control link to the peer.
func (a *Agent) peerHost(node string) (string, bool) {
	if node == a.identity.NodeID {
		_, local := a.directHost()
		return local, local != ""
	}
	for _, l := range a.node.Links() {
		if l.PeerID == node && l.RemoteAddr != "" {
			h, _, err := net.SplitHostPort(l.RemoteAddr)
			return h, err == nil
		}
	}
	return "", false
}

func (a *Agent) publishIdentity() {
	a.idMu.Lock()
	id := a.identity
	a.idMu.Unlock()
	if err := a.seq.Publish(state.NodeIdentityMeasured{NodeID: id.NodeID, Identity: id}); err != nil {
		a.log.Warn("publish identity", "err", err)
	}
}

// peerAddrs turns discovered peers into dial targets (first address each).
func peerAddrs(ps []discovery.Peer) []cluster.PeerAddr {
	out := make([]cluster.PeerAddr, 0, len(ps))
	for _, p := range ps {
		if len(p.Addrs) > 0 {
			out = append(out, cluster.PeerAddr{Addr: p.Addrs[0].String(), NodeID: p.NodeID})
		}
	}
	return out
}

// Close releases the listeners of an agent that will not run (Stop and
// Run close them themselves).
func (a *Agent) Close() error {
	return errors.Join(a.ln.Close(), a.pln.Close())
}

// PeerAddr returns the address peer links are accepted on.
func (a *Agent) PeerAddr() net.Addr { return a.node.Addr() }

// NodeID returns this node's id.
func (a *Agent) NodeID() string { return a.identity.NodeID }

// Addr returns the API's listening address.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// Store returns the node's state store.
func (a *Agent) Store() *state.Store { return a.store }

var errNoExe = errors.New("cannot find the orrery binary to start runners with")
