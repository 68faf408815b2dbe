package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/instance"
	"github.com/orrery-cluster/orrery/agent/shard"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/engine/modelstore"
	"github.com/orrery-cluster/orrery/frontend"
)

// The agent's services: each runs until the agent's context ends. One
// that returns before then, with an error or without, has failed: the
// agent stops every other service and Wait returns that failure. An agent
// never carries on without its cluster link, discovery or API.

// ErrServiceStopped is wrapped when a service returned without an error
// while the agent was still running.
var ErrServiceStopped = errors.New("stopped unexpectedly")

// shutdownWait bounds the graceful shutdown of the HTTP servers.
const shutdownWait = 5 * time.Second

// service is one long-running part of the agent.
type service struct {
	name string
	run  func(ctx context.Context) error
}

// Run starts the agent and waits until ctx ends or a service fails. It
// returns the failure, or nil after a clean stop.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	return a.Wait()
}

// Start publishes the identity and starts every service. It returns at
// once; Stop (or ctx's end) stops them, and Wait waits for that.
func (a *Agent) Start(ctx context.Context) error {
	if a.run != nil {
		return errors.New("agent already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan struct{})}
	a.run = r
	// The cluster node stops last (see shutdown): its context is not
	// ctx, which ends every other service.
	nctx, ncancel := context.WithCancel(context.WithoutCancel(ctx))
	r.node = nodeRun{cancel: ncancel, done: make(chan struct{})}
	go func() {
		r.node.err = a.node.Run(nctx)
		close(r.node.done)
	}()
	svcs := a.services(ctx)
	a.log.Info("agent started", "api", "http://"+a.ln.Addr().String(), "dataDir", a.cfg.DataDir,
		"name", a.identity.FriendlyName, "version", a.cfg.Version)
	// The identity is the node's first event: before any sampler runs.
	// Instances restored from disk follow at once.
	a.publishIdentity()
	a.ledger.Kick("agent started")
	go a.measureSpeed(ctx, a.exe)
	go func() {
		r.err = runAll(ctx, a.log, svcs)
		a.shutdown(&r.node)
		if r.err != nil {
			a.log.Error("agent stopped", "err", r.err)
		} else {
			a.log.Info("agent stopped")
		}
		close(r.done)
	}()
	return nil
}

// Wait blocks until the agent has stopped and returns the service failure
// that stopped it, if any.
func (a *Agent) Wait() error {
	if a.run == nil {
		return errors.New("agent not started")
	}
	<-a.run.done
	return a.run.err
}

// Stop stops every service and waits for them.
func (a *Agent) Stop() error {
	if a.run == nil {
		return a.Close()
	}
	a.run.cancel()
	return a.Wait()
}

// runAll runs every service until ctx ends or one of them fails; then it
// cancels the rest, waits for them and returns the first failure.
func runAll(ctx context.Context, log *slog.Logger, svcs []service) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.run(ctx)
			if ctx.Err() != nil {
				return // stopping: whatever it returned is not a failure
			}
			if err == nil {
				err = ErrServiceStopped
			}
			once.Do(func() {
				first = fmt.Errorf("%s: %w", s.name, err)
				log.Error("service failed; stopping the agent", "service", s.name, "err", err)
			})
			cancel()
		}()
	}
	wg.Wait()
	return first
}

// services lists the agent's services, built for ctx.
func (a *Agent) services(ctx context.Context) []service {
	svcs := []service{
		{"cluster", func(ctx context.Context) error {
			// Node.Run returning while the agent runs is a failure.
			select {
			case <-a.run.node.done:
				return a.run.node.err
			case <-ctx.Done():
				return nil
			}
		}},
		{"discovery", a.disc.Run},
		{"instances", a.instances.Run},
		{"ownership", a.ledger.Run},
		{"pulls", func(ctx context.Context) error { <-ctx.Done(); a.pulls.Close(); return nil }},
		{"api", a.serveAPI},
		{"peer api", a.servePeerAPI},
	}
	for _, sm := range a.samplers() {
		svcs = append(svcs, service{"sampler " + sm.s.Name(), func(ctx context.Context) error {
			telemetry.Run(ctx, sm.s, sm.every, a.seq, a.cfg.Logger)
			if c, ok := sm.s.(io.Closer); ok {
				c.Close() // the system sampler holds OS handles
			}
			return nil
		}})
	}
	return svcs
}

type sampler struct {
	s     telemetry.Sampler
	every time.Duration
}

func (a *Agent) samplers() []sampler {
	id := a.identity.NodeID
	return []sampler{
		{&telemetry.MemorySampler{NodeID: id, Limit: a.cfg.RAMLimit}, a.cfg.MemoryInterval},
		{telemetry.NewSystemSampler(id, a.cfg.Logger), a.cfg.SystemInterval},
		{&telemetry.DiskSampler{NodeID: id, Path: filepath.Join(a.cfg.DataDir, "models")}, a.cfg.DiskInterval},
		{telemetry.NewNetworkSampler(id), a.cfg.NetworkInterval},
		{&telemetry.LinkSampler{NodeID: id, Links: a.peerLinks, State: a.store.State, FailAfter: a.cfg.FailAfter}, a.cfg.LinkInterval},
		{a.instances.ModelsSampler(), instance.ModelScanInterval},
	}
}

// apiServer is the node's API, served on loopback and (for forwarded
// requests) to peers.
func (a *Agent) apiServer() *api.Server {
	return &api.Server{NodeID: a.identity.NodeID, Version: a.cfg.Version, Store: a.store, Logger: a.log,
		Cluster: clusterView{a}, Discovery: discoveryView{a.disc}, GPU: gpuView{a}, Traces: a.traces, OpenURL: OpenInBrowser,
		Inference: a.instances, Pulls: pullsView{a.pulls, a.instances},
		TraceHome: func() string { return a.node.Status().MasterID }, UI: frontend.Handler(),
		Metrics: api.NewMetrics(a.store, a.traces),
		// Other machines' requests carry other hosts; the token guards
		// them (and DNS rebinding: a request to a name that is not
		// loopback needs the token too).
		AllowAnyHost: a.apiToken != ""}
}

// serveAPI serves the API (and the runners' /internal/ endpoints) on the
// API listener: loopback by default.
func (a *Agent) serveAPI(ctx context.Context) error {
	return serveHTTP(ctx, a.log, a.ln, a.apiHandler())
}

// APIRoutes lists what the API listener serves: the API's routes (behind
// the API token beyond loopback) and the runners' (under /internal/,
// behind each runner's own token), for tests that must cover every one.
func APIRoutes() (apiRoutes, runnerRoutes []api.Route) {
	for _, rt := range supervisor.RelayRoutes() {
		runnerRoutes = append(runnerRoutes, api.Route{Pattern: rt[1], Methods: []string{rt[0]}})
	}
	return (&Agent{}).apiServer().Routes(), runnerRoutes
}

// apiHandler is what the API listener serves: the API, behind the token
// when it has one, and the runners' endpoints (/internal/), which take
// each runner's own token instead.
func (a *Agent) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/internal/", a.relay.Handler())
	var h http.Handler = a.apiServer().Handler()
	if a.apiToken != "" {
		h = api.RequireToken(a.apiToken, h)
	}
	mux.Handle("/", h)
	return mux
}

// servePeerAPI serves other nodes over stream links: the API (for
// forwarded requests) and shards.
func (a *Agent) servePeerAPI(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+shard.Path, a.shards)
	mux.Handle("/", a.apiServer().PeerHandler())
	return serveHTTP(ctx, a.log, a.peerLn, mux)
}

// serveHTTP serves h on ln until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, log *slog.Logger, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		// Long-lived SSE streams end when the agent's context does.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	srv.Shutdown(sctx)
	return nil
}

// shutdownShipWait bounds how long a stopping agent waits for trace data
// still on its way to the master: it is delivered in milliseconds over a
// live link, and not at all to a master that is gone (stopping too, say).
const shutdownShipWait = 300 * time.Millisecond

// shutdown releases what the services leave behind, in order, and stops
// the cluster node last.
func (a *Agent) shutdown(node *nodeRun) {
	// Runners first: requests still waiting on them end with an error.
	a.sup.Close()
	a.peerLn.Close()
	a.ln.Close()
	// Ship what requests left, through the node, which still runs; save
	// what ranks delivered for traces still being merged here.
	a.tracer.Close(shutdownShipWait)
	node.cancel()
	<-node.done
}

type clusterView struct{ a *Agent }

func (v clusterView) ClusterStatus() cluster.Status   { return v.a.node.Status() }
func (v clusterView) HashAt(idx int64) (string, bool) { return v.a.replica.HashAt(idx) }

// RingBench runs the ring benchmark coordinated by this node and, unless
// noTrace, announces its trace (see tracecollect.AnnounceRing).
func (v clusterView) RingBench(ctx context.Context, size, rounds int, noTrace bool) (api.RingBenchResult, error) {
	res, err := v.a.ring.Run(ctx, size, rounds, noTrace)
	out := api.RingBenchResult{Result: res}
	if res.Bench == "" || noTrace {
		return out, err
	}
	tr := v.a.tracer.AnnounceRing(ctx, res, err)
	out.TraceID, out.TraceMaster, out.TraceSaved = tr.ID, tr.Master, tr.Saved
	if err != nil && tr.ID != "" {
		return out, fmt.Errorf("%w (its partial trace %s goes to the master, %s)", err, tr.ID, tr.Master)
	}
	return out, err
}

type discoveryView struct{ d *discovery.Discovery }

func (v discoveryView) DiscoveryReport() discovery.Report { return v.d.Diagnose() }

// localModel is the path of a model this node has (by id), for a runner
// to load.
func localModel(models *modelstore.Scanner, id string) (string, error) {
	e, ok := models.Find(id)
	switch {
	case !ok:
		return "", fmt.Errorf("model %q is not on this node", id)
	case e.Error != "":
		return "", fmt.Errorf("model %q cannot run here: %s", id, e.Error)
	}
	return e.Path, nil
}
