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
	"github.com/orrery-cluster/orrery/agent/telemetry"
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
		APIAddr:         "127.0.0.1:52416",
		DataDir:         dir,
		MemoryInterval:  500 * time.Millisecond,
		SystemInterval:  time.Second,
		DiskInterval:    10 * time.Second,
		NetworkInterval: 5 * time.Second,
		Version:         "dev",
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
	return nil
}

// Agent is one running node.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	identity state.NodeIdentity
	store    *state.Store
	seq      state.Sequencer
	ln       net.Listener
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
	id, err := identity.Load(identity.Options{DataDir: cfg.DataDir, AgentVersion: cfg.Version, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("api listen on %s: %w", cfg.APIAddr, err)
	}
	store := state.NewStore(state.NewLog(state.DefaultLogRetention), state.NewMemoryHistory(state.DefaultHistoryWindow))
	return &Agent{
		cfg:      cfg,
		log:      cfg.Logger.With("nodeId", id.NodeID),
		identity: id,
		store:    store,
		seq:      &state.LocalSequencer{Store: store},
		ln:       ln,
	}, nil
}

// NodeID returns this node's id.
func (a *Agent) NodeID() string { return a.identity.NodeID }

// Addr returns the API's listening address.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// Store returns the node's state store.
func (a *Agent) Store() *state.Store { return a.store }

// Run publishes the identity, starts the samplers and serves the API until
// ctx ends, then shuts everything down and returns. It returns an error only
// if a service failed.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := a.seq.Publish(state.NodeIdentityMeasured{NodeID: a.identity.NodeID, Identity: a.identity}); err != nil {
		a.ln.Close()
		return fmt.Errorf("publish identity: %w", err)
	}
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
	}
	var wg sync.WaitGroup
	for _, sm := range samplers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			telemetry.Run(ctx, sm.s, sm.interval, a.seq, a.cfg.Logger)
		}()
	}

	srv := &http.Server{
		Handler:           (&api.Server{NodeID: id, Version: a.cfg.Version, Store: a.store, Logger: a.log}).Handler(),
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
	if serr := srv.Shutdown(shutCtx); serr != nil && err == nil {
		err = fmt.Errorf("api shutdown: %w", serr)
	}
	wg.Wait()
	a.log.Info("agent stopped")
	return err
}
