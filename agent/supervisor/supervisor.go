package supervisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Defaults and limits.
const (
	// DefaultReadyTimeout bounds how long a request waits for its runner
	// to be Ready (loading, or restarting after a crash).
	DefaultReadyTimeout = 2 * time.Minute
	// listenTimeout bounds the wait for a new runner's address line.
	listenTimeout = 30 * time.Second
	// stopGrace is how long a runner gets after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// healthEvery is the status polling period while a runner loads.
	healthEvery = 200 * time.Millisecond
	// backoffMin and backoffMax bound the wait before restarting a
	// failed runner; it doubles per consecutive failure and resets once
	// a runner has stayed up for stableAfter.
	backoffMin  = 500 * time.Millisecond
	backoffMax  = 30 * time.Second
	stableAfter = time.Minute
	// tailLines of a runner's stderr go into its Failed error.
	tailLines = 8
)

// TokenEnv carries the runner's bearer token (cmd/orrery reads it).
const TokenEnv = "ORRERY_RUNNER_TOKEN"

// ErrNoInstance is wrapped when an instance has no runner on this node.
var ErrNoInstance = errors.New("no runner for this instance on this node")

// ErrRunnerFailed is wrapped when a runner died or broke off mid-request.
var ErrRunnerFailed = errors.New("runner failed")

// Config configures a Supervisor.
type Config struct {
	NodeID, NodeName string
	// Exe is the orrery binary; runners are started as `Exe runner …`.
	Exe string
	// LogDir gets one runner-<instance>.log per instance (appended).
	LogDir string
	// Threads and ContextLen are passed to runners (0: their defaults).
	Threads, ContextLen int
	// ModelPath resolves a model id on this node.
	ModelPath func(modelID string) (string, error)
	// Publish sends a runner's status changes into the cluster state.
	Publish func(state.Event) error
	// OnLoaded, when set, gets the spans a runner recorded while loading
	// (called once per successful load).
	OnLoaded func(inst state.Instance, loadNo int, spans []trace.Span)
	// ReadyTimeout defaults to DefaultReadyTimeout.
	ReadyTimeout time.Duration
	Logger       *slog.Logger
}

// Supervisor owns this node's runner processes.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex // guards procs, stopped and closed
	procs map[string]*proc
	// stopped are instances Stop took down: Reconcile does not start
	// them again while the state still shows them (their deletion is on
	// its way through the master).
	stopped map[string]bool
	closed  bool
	wg      sync.WaitGroup
}

// New returns a supervisor with no runners.
func New(cfg Config) *Supervisor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger.With("component", "supervisor"), procs: map[string]*proc{}, stopped: map[string]bool{}}
}

// proc is one instance's runner and its restarts.
type proc struct {
	s    *Supervisor
	inst state.Instance
	id   string // runner id
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex // guards the fields below
	status   state.Runner
	client   *runner.Client // set while the current process is Ready
	changed  chan struct{}  // closed and replaced on every change
	inflight int
	stopping bool
}

// Reconcile starts a runner for every instance of st placed on this node
// and stops those whose instance is gone.
func (s *Supervisor) Reconcile(st state.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for id, in := range st.Instances {
		if _, ok := s.procs[id]; ok || s.stopped[id] || !s.mine(in) {
			continue
		}
		p := &proc{s: s, inst: in, id: runnerID(in), stop: make(chan struct{}), done: make(chan struct{}), changed: make(chan struct{})}
		p.status = state.Runner{RunnerID: p.id, InstanceID: id, NodeID: s.cfg.NodeID, Rank: 0, Status: state.RunnerIdle}
		s.procs[id] = p
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.run()
		}()
	}
	for id, p := range s.procs {
		if _, ok := st.Instances[id]; !ok {
			delete(s.procs, id)
			p.halt()
		}
	}
	for id := range s.stopped {
		if _, ok := st.Instances[id]; !ok {
			delete(s.stopped, id)
		}
	}
}

func (s *Supervisor) mine(in state.Instance) bool {
	return in.NodeID == s.cfg.NodeID && len(in.Ranks) == 1 && in.Ranks[0].NodeID == s.cfg.NodeID
}

func runnerID(in state.Instance) string { return in.InstanceID + "-0" }

// Stop stops the instance's runner (publishing Shutdown) and waits for it.
func (s *Supervisor) Stop(instanceID string) {
	s.mu.Lock()
	p := s.procs[instanceID]
	delete(s.procs, instanceID)
	s.stopped[instanceID] = true
	s.mu.Unlock()
	if p != nil {
		p.halt()
		<-p.done
	}
}

// Close stops every runner and waits for them.
func (s *Supervisor) Close() {
	s.mu.Lock()
	s.closed = true
	for id, p := range s.procs {
		delete(s.procs, id)
		p.halt()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Status returns the instance's runner status on this node.
func (s *Supervisor) Status(instanceID string) (state.Runner, bool) {
	s.mu.Lock()
	p := s.procs[instanceID]
	s.mu.Unlock()
	if p == nil {
		return state.Runner{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, true
}

// Complete runs a completion on the instance's runner, waiting (at most
// ReadyTimeout) for it to be Ready. Requests to one runner queue in the
// runner in arrival order.
func (s *Supervisor) Complete(ctx context.Context, instanceID string, req runner.CompletionRequest, onPiece func(runner.Piece) error) (*runner.Done, error) {
	s.mu.Lock()
	p := s.procs[instanceID]
	s.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoInstance, instanceID)
	}
	c, err := p.waitReady(ctx, s.cfg.ReadyTimeout)
	if err != nil {
		return nil, err
	}
	p.begin()
	defer p.end()
	done, err := c.Complete(ctx, req, onPiece)
	if errors.Is(err, runner.ErrStreamBroken) {
		return nil, fmt.Errorf("%w: runner %s (instance %s) broke off mid-completion: %v", ErrRunnerFailed, p.id, instanceID, err)
	}
	return done, err
}

func (p *proc) waitReady(ctx context.Context, timeout time.Duration) (*runner.Client, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		p.mu.Lock()
		c, ch, st := p.client, p.changed, p.status
		p.mu.Unlock()
		if c != nil {
			return c, nil
		}
		if st.Status == state.RunnerShutdown {
			return nil, fmt.Errorf("%w: runner %s is shut down", ErrNoInstance, p.id)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			msg := fmt.Sprintf("runner %s not ready after %v (status %s", p.id, timeout, st.Status)
			if st.Error != "" {
				msg += ": " + st.Error
			}
			return nil, fmt.Errorf("%w: %s)", ErrRunnerFailed, msg)
		}
	}
}

// begin and end count requests, for the Running status.
func (p *proc) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight++
	if p.inflight == 1 && p.status.Status == state.RunnerReady {
		p.setLocked(func(r *state.Runner) { r.Status = state.RunnerRunning })
	}
}

func (p *proc) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	if p.inflight == 0 && p.status.Status == state.RunnerRunning {
		p.setLocked(func(r *state.Runner) { r.Status = state.RunnerReady })
	}
}

// setLocked changes the status, publishes it and wakes waiters.
func (p *proc) setLocked(change func(*state.Runner)) {
	prev := p.status
	change(&p.status)
	if p.status.Status != prev.Status {
		p.status.Since = time.Now().UTC()
	}
	if p.status == prev {
		return
	}
	close(p.changed)
	p.changed = make(chan struct{})
	if err := p.s.cfg.Publish(state.RunnerStatusChanged{NodeID: p.s.cfg.NodeID, Runner: p.status}); err != nil {
		p.s.log.Warn("publish runner status", "runner", p.id, "err", err)
	}
}

func (p *proc) set(change func(*state.Runner)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(change)
}

func (p *proc) halt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopping {
		p.stopping = true
		close(p.stop)
	}
}

var errStopped = errors.New("stopped")

// run starts the runner and starts it again after each failure, until
// halted.
func (p *proc) run() {
	defer close(p.done)
	log := p.s.log.With("runner", p.id, "model", p.inst.ModelID)
	backoff := backoffMin
	for loads := 0; ; {
		started := time.Now()
		err := p.runOnce(log, &loads)
		if errors.Is(err, errStopped) {
			p.set(func(r *state.Runner) {
				*r = state.Runner{RunnerID: r.RunnerID, InstanceID: r.InstanceID, NodeID: r.NodeID, Rank: r.Rank,
					Status: state.RunnerShutdown, TotalLayers: r.TotalLayers, Restarts: r.Restarts}
			})
			log.Info("runner shut down")
			return
		}
		log.Warn("runner failed", "err", err)
		p.set(func(r *state.Runner) { r.Status, r.Error, r.Pid = state.RunnerFailed, err.Error(), 0 })
		if time.Since(started) > stableAfter {
			backoff = backoffMin
		}
		select {
		case <-p.stop:
			p.set(func(r *state.Runner) { r.Status = state.RunnerShutdown })
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
		p.set(func(r *state.Runner) { r.Restarts++ })
	}
}

// runOnce runs one runner process until it exits or the proc is halted.
func (p *proc) runOnce(log *slog.Logger, loads *int) error {
	cfg := p.s.cfg
	path, err := cfg.ModelPath(p.inst.ModelID)
	if err != nil {
		return fmt.Errorf("model %s: %w", p.inst.ModelID, err)
	}
	token, err := newToken()
	if err != nil {
		return err
	}
	rg := p.inst.Ranks[0]
	args := []string{"runner", "--model", path, "--node", cfg.NodeID, "--node-name", cfg.NodeName,
		"--first-layer", strconv.Itoa(rg.FirstLayer), "--last-layer", strconv.Itoa(rg.LastLayer)}
	if cfg.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(cfg.Threads))
	}
	if cfg.ContextLen > 0 {
		args = append(args, "--ctx", strconv.Itoa(cfg.ContextLen))
	}
	cmd := exec.Command(cfg.Exe, args...)
	cmd.Env = append(os.Environ(), TokenEnv+"="+token)
	setParentDeath(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	tail := &tailWriter{max: tailLines}
	var logw io.Writer = tail
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o700); err == nil {
			if f, err := os.OpenFile(filepath.Join(cfg.LogDir, "runner-"+p.inst.InstanceID+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
				defer f.Close()
				logw = io.MultiWriter(f, tail)
			}
		}
	}
	cmd.Stderr = logw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start runner: %w", err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), runner.ListenPrefix); ok {
				select {
				case lines <- addr:
				default:
				}
			}
		}
	}()
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	log.Info("runner started", "pid", pid, "path", path)
	p.set(func(r *state.Runner) { r.Status, r.Pid, r.Error, r.LayersLoaded = state.RunnerIdle, pid, "", 0 })

	kill := func() error {
		p.mu.Lock()
		p.client = nil
		p.mu.Unlock()
		stdin.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			cmd.Process.Kill()
			<-exited
		}
		return errStopped
	}
	died := func(err error) error {
		p.mu.Lock()
		p.client = nil
		p.mu.Unlock()
		msg := fmt.Sprintf("runner (pid %d) exited: %v", pid, err)
		if t := tail.String(); t != "" {
			msg += "; last output: " + t
		}
		return errors.New(msg)
	}
	var addr string
	select {
	case addr = <-lines:
	case err := <-exited:
		return died(err)
	case <-p.stop:
		return kill()
	case <-time.After(listenTimeout):
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("runner (pid %d) printed no address within %v", pid, listenTimeout)
	}
	client := &runner.Client{Addr: addr, Token: token}
	tick := time.NewTicker(healthEvery)
	defer tick.Stop()
	for ready := false; !ready; {
		select {
		case err := <-exited:
			return died(err)
		case <-p.stop:
			return kill()
		case <-tick.C:
		}
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := client.Health(hctx)
		cancel()
		if err != nil {
			continue // not answering yet; a dead process shows on exited
		}
		switch h.Status {
		case runner.StatusFailed:
			kill()
			return fmt.Errorf("load %s: %s", path, h.Error)
		case runner.StatusReady:
			ready = true
		}
		p.set(func(r *state.Runner) {
			r.Status, r.LayersLoaded, r.TotalLayers = state.RunnerLoading, h.LayersLoaded, h.TotalLayers
		})
	}
	*loads++
	if cfg.OnLoaded != nil {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		spans, err := client.LoadSpans(lctx)
		cancel()
		if err == nil {
			cfg.OnLoaded(p.inst, *loads, spans)
		}
	}
	p.mu.Lock()
	p.client = client
	p.setLocked(func(r *state.Runner) {
		r.Status = state.RunnerReady
		if p.inflight > 0 {
			r.Status = state.RunnerRunning
		}
	})
	p.mu.Unlock()
	log.Info("runner ready", "pid", pid, "addr", addr)
	select {
	case err := <-exited:
		return died(err)
	case <-p.stop:
		return kill()
	}
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("runner token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// tailWriter keeps the last max lines written to it.
type tailWriter struct {
	max   int
	mu    sync.Mutex
	lines []string
	part  []byte
}

func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.part = append(t.part, b...)
	for {
		i := strings.IndexByte(string(t.part), '\n')
		if i < 0 {
			break
		}
		t.lines = append(t.lines, string(t.part[:i]))
		t.part = t.part[i+1:]
		if len(t.lines) > t.max {
			t.lines = t.lines[1:]
		}
	}
	if len(t.part) > 4096 {
		t.part = t.part[len(t.part)-4096:]
	}
	return len(b), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}
