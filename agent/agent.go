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
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/identity"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/agent/tracecollect"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/frontend"
)

// Config is one agent's configuration. DefaultConfig fills every field.
type Config struct {
	// APIAddr is where the local HTTP API listens. Keep it on loopback:
	// the API is not authenticated.
	APIAddr string
	// DataDir holds node.json, models/ and (later) traces/.
	DataDir string
	// MemoryInterval, SystemInterval, DiskInterval and NetworkInterval are
	// the sampling periods.
	MemoryInterval  time.Duration
	SystemInterval  time.Duration
	DiskInterval    time.Duration
	NetworkInterval time.Duration
	// PeerAddr is where peer (TLS, cluster-key authenticated) links are
	// accepted. Port 0 picks a free port, which discovery advertises.
	PeerAddr string
	// Peers are static peers (host:port), for VPNs and VLANs where mDNS
	// does not reach.
	Peers []string
	// MDNS advertises and browses _orrery._tcp on the local network.
	MDNS bool
	// LoopbackDir, when set, lets agents on one machine find each other
	// through records in this directory, without multicast.
	LoopbackDir string
	// Heartbeat and FailAfter tune failure detection: a peer silent for
	// FailAfter is gone.
	Heartbeat, FailAfter time.Duration
	// Getenv reads ORRERY_CLUSTER_KEY; nil means os.Getenv.
	Getenv func(string) string
	// TraceMergeTimeout is how long the master waits, after a traced task
	// ended, for ranks that have not delivered their spans; the trace is
	// then saved as partial, naming them.
	TraceMergeTimeout time.Duration
	// RunnerExe is the orrery binary that model runners are started with
	// (`RunnerExe runner …`); empty means this very executable.
	RunnerExe string
	// RunnerThreads and ContextLen are passed to runners (0: all CPUs,
	// and the model's context length).
	RunnerThreads, ContextLen int
	// ModelDirs are where models are looked for; nil means
	// model.DefaultDirs (the data dir, Ollama, LM Studio, the HF cache).
	ModelDirs *model.Dirs
	// Version is reported in the identity and /healthz.
	Version string
	Logger  *slog.Logger
}

// DefaultConfig returns the defaults: API on 127.0.0.1:52416, data in
// ~/.orrery, memory every 0.5 s, system every 1 s, disk every 10 s, network
// every 5 s.
func DefaultConfig() Config {
	dir := ".orrery"
	if home, err := os.UserHomeDir(); err == nil {
		dir = filepath.Join(home, ".orrery")
	}
	return Config{
		APIAddr:           "127.0.0.1:52416",
		DataDir:           dir,
		MemoryInterval:    500 * time.Millisecond,
		SystemInterval:    time.Second,
		DiskInterval:      10 * time.Second,
		NetworkInterval:   5 * time.Second,
		PeerAddr:          "0.0.0.0:52400",
		MDNS:              true,
		Heartbeat:         time.Second,
		FailAfter:         cluster.DefaultFailAfter,
		TraceMergeTimeout: tracecollect.DefaultTimeout,
		Version:           "dev",
	}
}

func (c Config) validate() error {
	for name, d := range map[string]time.Duration{
		"memory interval": c.MemoryInterval, "system interval": c.SystemInterval,
		"disk interval": c.DiskInterval, "network interval": c.NetworkInterval,
	} {
		if d < 50*time.Millisecond || d > time.Hour {
			return fmt.Errorf("%s %v: want 50ms..1h", name, d)
		}
	}
	if c.DataDir == "" {
		return errors.New("data dir is empty")
	}
	if _, _, err := net.SplitHostPort(c.APIAddr); err != nil {
		return fmt.Errorf("api addr %q: %w", c.APIAddr, err)
	}
	if _, _, err := net.SplitHostPort(c.PeerAddr); err != nil {
		return fmt.Errorf("peer addr %q: %w", c.PeerAddr, err)
	}
	if c.Heartbeat < 10*time.Millisecond || c.FailAfter < 2*c.Heartbeat {
		return fmt.Errorf("heartbeat %v / fail-after %v: want heartbeat ≥ 10ms and fail-after ≥ 2 heartbeats", c.Heartbeat, c.FailAfter)
	}
	if c.TraceMergeTimeout < 100*time.Millisecond || c.TraceMergeTimeout > 10*time.Minute {
		return fmt.Errorf("trace merge timeout %v: want 100ms..10m", c.TraceMergeTimeout)
	}
	return nil
}

// Agent is one running node.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	identity  state.NodeIdentity
	store     *state.Store
	seq       state.Sequencer
	ln        net.Listener // API
	pln       net.Listener // peer links; owned by node once Run starts
	node      *cluster.Node
	disc      *discovery.Discovery
	replica   *replica
	traces    *tracestore.Store
	collector *tracecollect.Collector // merges ranks' spans (on the master)
	models    *model.Scanner
	// modelsSampler publishes the model list (also on master changes).
	modelsSampler *modelsSampler
	sup           *supervisor.Supervisor
	peerLn        *streamListener // stream links from peers, for the peer API
	peerHTTP      *http.Client    // to other nodes' peer APIs
	bg            sync.WaitGroup  // trace shipping started by requests
	hashes        hashCache       // model files' sha256
	shardMu       sync.Mutex      // serialises cutting shards
	failMu        sync.Mutex      // guards failSeen
	failSeen      map[string]time.Time
	placeMu       sync.Mutex // serialises replacing failed instances
	vocabs        vocabCache // tokenizers for /tokenize
}

// New loads the identity, prepares the data dir and binds the API listener,
// so that a busy port fails here rather than later. Run starts the work.
func New(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
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
	id, err := identity.Load(identity.Options{DataDir: cfg.DataDir, AgentVersion: cfg.Version, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	key, src, err := auth.LoadOrCreateKey(cfg.DataDir, getenv)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	cfg.Logger.Info("cluster key", "source", string(src), "fingerprint", key.Fingerprint())
	cert, err := auth.NewNodeCert(key, id.NodeID, time.Now())
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("api listen on %s: %w", cfg.APIAddr, err)
	}
	pln, err := net.Listen("tcp", cfg.PeerAddr)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("peer listen on %s: %w", cfg.PeerAddr, err)
	}
	peerPort := pln.Addr().(*net.TCPAddr).Port
	fail := func(err error) (*Agent, error) {
		ln.Close()
		pln.Close()
		return nil, err
	}
	disc, err := discovery.New(discovery.Config{
		NodeID: id.NodeID, Version: cfg.Version, KeyFP: key.Fingerprint(), PeerPort: peerPort,
		MDNS: cfg.MDNS, Static: cfg.Peers, LoopbackDir: cfg.LoopbackDir, Logger: cfg.Logger,
	})
	if err != nil {
		return fail(fmt.Errorf("discovery: %w", err))
	}
	dirs := cfg.ModelDirs
	if dirs == nil {
		home, _ := os.UserHomeDir()
		d := model.DefaultDirs(cfg.DataDir, home, getenv)
		dirs = &d
	}
	exe := cfg.RunnerExe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fail(fmt.Errorf("%w: %v", errNoExe, err))
		}
	}
	store := state.NewStore(state.NewLog(state.DefaultLogRetention), state.NewMemoryHistory(state.DefaultHistoryWindow))
	rep := newReplica(store)
	a := &Agent{
		cfg:      cfg,
		log:      cfg.Logger.With("nodeId", id.NodeID),
		identity: id,
		store:    store,
		ln:       ln,
		pln:      pln,
		disc:     disc,
		replica:  rep,
		traces:   traces,
		models:   &model.Scanner{Dirs: *dirs},
		peerLn:   newStreamListener(pln.Addr()),
		failSeen: map[string]time.Time{},
	}
	a.peerHTTP = &http.Client{Transport: a.peerTransport()}
	a.sup = supervisor.New(supervisor.Config{NodeID: id.NodeID, NodeName: id.FriendlyName, Exe: exe,
		AgentAPI: ln.Addr().String(), LogDir: filepath.Join(cfg.DataDir, "logs"), Threads: cfg.RunnerThreads,
		ContextLen: cfg.ContextLen, ModelFile: a.modelFile,
		Publish: func(ev state.Event) error { return a.seq.Publish(ev) }, OnLoaded: a.onLoaded, Logger: a.log})
	a.collector = tracecollect.New(tracecollect.Config{Timeout: cfg.TraceMergeTimeout,
		ClockOffsets: a.clockOffsets, Self: id.NodeID, Save: a.saveTrace, Logger: a.log})
	node, err := cluster.NewNode(cluster.Config{
		NodeID: id.NodeID, StartedAt: id.StartedAt, Version: cfg.Version,
		Listener: pln, PeerPort: peerPort,
		ServerTLS: cert.ServerConfig(), ClientTLS: cert.ClientConfig(), PeerID: auth.PeerNodeID,
		Peers: func() []cluster.PeerAddr { return peerAddrs(disc.Peers()) },
		DialResult: func(p cluster.PeerAddr, err error) {
			disc.ReportDial(p.NodeID, p.Addr, err, err != nil && auth.IsKeyMismatch(err))
		},
		App: rep, Heartbeat: cfg.Heartbeat, FailAfter: cfg.FailAfter, Logger: cfg.Logger,
		OnTrace: a.onTrace, RingRun: a.ringRankRun,
		OnStream: a.onStream,
	})
	if err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	a.node, a.seq = node, clusterSequencer{node: node}
	// Whoever becomes master must know every node's identity: republish
	// ours on each change. The master turns failure detection into state.
	// The same goes for the models each node has.
	a.modelsSampler = &modelsSampler{nodeID: id.NodeID, scan: a.models}
	rep.onMaster = func(string, bool) {
		a.publishIdentity()
		a.publishModels()
	}
	rep.onGone = func(gone string) {
		if err := a.seq.Publish(state.NodeGone{NodeID: gone}); err != nil {
			a.log.Warn("publish node gone", "node", gone, "err", err)
		}
	}
	return a, nil
}

func (a *Agent) publishIdentity() {
	if err := a.seq.Publish(state.NodeIdentityMeasured{NodeID: a.identity.NodeID, Identity: a.identity}); err != nil {
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

// Close releases the listeners of an agent that will not Run (Run closes
// them itself when it ends).
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

type clusterView struct{ a *Agent }

func (v clusterView) ClusterStatus() cluster.Status   { return v.a.node.Status() }
func (v clusterView) HashAt(idx int64) (string, bool) { return v.a.replica.HashAt(idx) }
func (v clusterView) RingBench(ctx context.Context, size, rounds int, noTrace bool) (api.RingBenchResult, error) {
	return v.a.ringBench(ctx, size, rounds, noTrace)
}

type discoveryView struct{ d *discovery.Discovery }

func (v discoveryView) DiscoveryReport() discovery.Report { return v.d.Diagnose() }

// Run publishes the identity, starts the samplers and serves the API until
// ctx ends, then shuts everything down and returns. It returns an error only
// if a service failed.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for name, run := range map[string]func(context.Context) error{"cluster": a.node.Run, "discovery": a.disc.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				a.log.Error("service failed", "service", name, "err", err)
			}
		}()
	}
	a.publishIdentity()
	a.log.Info("agent started", "api", "http://"+a.ln.Addr().String(), "dataDir", a.cfg.DataDir,
		"name", a.identity.FriendlyName, "version", a.cfg.Version)

	id := a.identity.NodeID
	system := telemetry.NewSystemSampler(id, a.cfg.Logger)
	defer system.Close()
	samplers := []struct {
		s        telemetry.Sampler
		interval time.Duration
	}{
		{&telemetry.MemorySampler{NodeID: id}, a.cfg.MemoryInterval},
		{system, a.cfg.SystemInterval},
		{&telemetry.DiskSampler{NodeID: id, Path: filepath.Join(a.cfg.DataDir, "models")}, a.cfg.DiskInterval},
		{telemetry.NewNetworkSampler(id), a.cfg.NetworkInterval},
		{&linkSampler{nodeID: id, links: a.node.Links, state: a.store.State, failAfter: a.cfg.FailAfter}, LinkInterval},
		{a.modelsSampler, ModelScanInterval},
	}
	for _, sm := range samplers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			telemetry.Run(ctx, sm.s, sm.interval, a.seq, a.cfg.Logger)
		}()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		a.reconcile(ctx)
	}()
	apiSrv := &api.Server{NodeID: id, Version: a.cfg.Version, Store: a.store, Logger: a.log,
		Cluster: clusterView{a}, Discovery: discoveryView{a.disc}, Traces: a.traces, OpenURL: OpenInBrowser,
		Inference: inference{a},
		TraceHome: func() string { return a.node.Status().MasterID }, UI: frontend.Handler(),
		Metrics: api.NewMetrics(a.store, a.traces)}
	peerMux := http.NewServeMux()
	peerMux.HandleFunc("GET /internal/shard", a.serveShard)
	peerMux.Handle("/", apiSrv.PeerHandler())
	peerSrv := &http.Server{Handler: peerMux, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		peerSrv.Serve(a.peerLn)
	}()
	localMux := http.NewServeMux()
	localMux.Handle("/internal/", a.internalHandler())
	localMux.Handle("/", apiSrv.Handler())
	srv := &http.Server{
		Handler:           localMux,
		ReadHeaderTimeout: 10 * time.Second,
		// Long-lived SSE streams end when the agent's context does.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(a.ln) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("api: %w", err)
		cancel()
	}
	shutCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	// Runners first: their requests end with an error event.
	a.sup.Close()
	if serr := srv.Shutdown(shutCtx); serr != nil && err == nil {
		err = fmt.Errorf("api shutdown: %w", serr)
	}
	peerSrv.Shutdown(shutCtx)
	a.peerLn.Close()
	wg.Wait()
	a.bg.Wait()
	// Save whatever ranks delivered for traces still being merged.
	a.collector.Close()
	a.log.Info("agent stopped")
	return err
}
