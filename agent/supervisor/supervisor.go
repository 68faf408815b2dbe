package supervisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	// to be Ready (shard transfer, loading, connecting rank links).
	DefaultReadyTimeout = 5 * time.Minute
	// appearWait bounds how long a request waits for a just-placed
	// instance to reach this node's state.
	appearWait = 10 * time.Second
	// listenTimeout bounds the wait for a new runner's address line.
	listenTimeout = 30 * time.Second
	// stopGrace is how long a runner gets after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// healthEvery is the status polling period while a runner loads.
	healthEvery = 200 * time.Millisecond
	// tailLines of a runner's stderr go into its Failed error.
	tailLines = 8
)

// TokenEnv carries the runner's bearer token (cmd/orrery reads it).
const TokenEnv = "ORRERY_RUNNER_TOKEN"

// ErrNoInstance is wrapped when an instance has no runner on this node.
var ErrNoInstance = errors.New("no runner for this instance on this node")

// ErrRunnerFailed is wrapped when a runner died or broke off mid-request.
var ErrRunnerFailed = errors.New("runner failed")

// ShardInfo says how a rank's model file was obtained.
type ShardInfo struct {
	// How is "model" (the whole model, on disk here), "built" (cut from
	// it here) or "transfer" (received from From).
	How   string
	From  string
	Bytes int64
}

// Progress is a shard transfer's progress.
type Progress struct {
	From       string
	Done, Size int64
}

// Config configures a Supervisor.
type Config struct {
	NodeID, NodeName string
	// Exe is the orrery binary; runners are started as `Exe runner …`.
	Exe string
	// AgentAPI is the agent's loopback API address, which runners of
	// pipeline ranks call back (rank links, their spans).
	AgentAPI string
	// LogDir gets one runner-<runner id>.log per rank (appended).
	LogDir string
	// Threads and ContextLen are passed to runners (0: their defaults).
	Threads, ContextLen int
	// ModelFile returns the file rank loads: the model itself, or its
	// shard (cut here, or received from another node while progress is
	// called).
	ModelFile func(ctx context.Context, in state.Instance, rank int, progress func(Progress)) (string, ShardInfo, error)
	// Publish sends a runner's status changes into the cluster state.
	Publish func(state.Event) error
	// OnLoaded, when set, gets the spans of a rank's load (shard transfer
	// included), once per successful load.
	OnLoaded func(in state.Instance, rank int, spans []trace.Span)
	// ReadyTimeout defaults to DefaultReadyTimeout.
	ReadyTimeout time.Duration
	Logger       *slog.Logger
}

// Supervisor owns this node's runner processes.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex       // guards procs, stopped and closed
	procs map[string]*proc // by runner id
	// stopped are instances Stop took down: Reconcile does not start
	// them again while the state still shows them.
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

// RunnerID names rank r of an instance.
func RunnerID(instanceID string, rank int) string { return fmt.Sprintf("%s-%d", instanceID, rank) }

// proc is one rank's runner.
type proc struct {
	s     *Supervisor
	inst  state.Instance
	rank  int
	id    string // runner id
	token string
	stop  chan struct{}
	done  chan struct{}

	mu       sync.Mutex // guards the fields below
	status   state.Runner
	client   *runner.Client // set while the runner is Ready
	rankAddr string         // where the runner accepts its inbound rank link
	changed  chan struct{}  // closed and replaced on every change
	inflight int
	stopping bool
}

// Reconcile starts a runner for every rank placed on this node of every
// live instance, and stops those whose instance is gone or has failed.
func (s *Supervisor) Reconcile(st state.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for id, in := range st.Instances {
		if s.stopped[id] || in.Status == state.InstanceStatusFailed {
			continue
		}
		for _, rk := range in.Ranks {
			rid := RunnerID(id, rk.Rank)
			if _, ok := s.procs[rid]; ok || rk.NodeID != s.cfg.NodeID {
				continue
			}
			token, err := newToken()
			if err != nil {
				s.log.Error("runner token", "err", err)
				continue
			}
			p := &proc{s: s, inst: in, rank: rk.Rank, id: rid, token: token, stop: make(chan struct{}), done: make(chan struct{}), changed: make(chan struct{})}
			p.status = state.Runner{RunnerID: rid, InstanceID: id, NodeID: s.cfg.NodeID, Rank: rk.Rank, Status: state.RunnerIdle,
				TotalLayers: rk.LastLayer - rk.FirstLayer}
			s.procs[rid] = p
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				p.run()
			}()
		}
	}
	for rid, p := range s.procs {
		if in, ok := st.Instances[p.inst.InstanceID]; !ok || in.Status == state.InstanceStatusFailed {
			delete(s.procs, rid)
			p.halt()
		}
	}
	for id := range s.stopped {
		if _, ok := st.Instances[id]; !ok {
			delete(s.stopped, id)
		}
	}
}

// Stop stops the instance's runners on this node (publishing Shutdown)
// and waits for them.
func (s *Supervisor) Stop(instanceID string) {
	s.mu.Lock()
	var ps []*proc
	for rid, p := range s.procs {
		if p.inst.InstanceID == instanceID {
			ps = append(ps, p)
			delete(s.procs, rid)
		}
	}
	s.stopped[instanceID] = true
	s.mu.Unlock()
	for _, p := range ps {
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

func (s *Supervisor) proc(runnerID string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[runnerID]
}

// Authorize says which rank a runner's bearer token belongs to.
func (s *Supervisor) Authorize(token string) (in state.Instance, rank int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if subtle.ConstantTimeCompare([]byte(token), []byte(p.token)) == 1 {
			return p.inst, p.rank, true
		}
	}
	return state.Instance{}, 0, false
}

// DialRank connects to the rank port of this node's runner for rank of
// instanceID and presents its token: what follows is the previous rank's
// link.
func (s *Supervisor) DialRank(ctx context.Context, instanceID string, rank int) (net.Conn, error) {
	p := s.proc(RunnerID(instanceID, rank))
	if p == nil {
		return nil, fmt.Errorf("%w: rank %d of %s", ErrNoInstance, rank, instanceID)
	}
	p.mu.Lock()
	addr := p.rankAddr
	p.mu.Unlock()
	if addr == "" {
		return nil, fmt.Errorf("rank %d of %s is not listening yet", rank, instanceID)
	}
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := runner.SendAuth(c, p.token); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Complete runs a completion on rank 0 of an instance on this node,
// waiting (at most ReadyTimeout) for the pipeline to be Ready. Requests to
// one runner queue in the runner in arrival order.
func (s *Supervisor) Complete(ctx context.Context, instanceID string, req runner.CompletionRequest, onPiece func(runner.Piece) error) (*runner.Done, error) {
	rid := RunnerID(instanceID, 0)
	p := s.proc(rid)
	for deadline := time.Now().Add(appearWait); p == nil && time.Now().Before(deadline); p = s.proc(rid) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
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
		return done, fmt.Errorf("%w: runner %s (instance %s) broke off mid-completion: %v", ErrRunnerFailed, p.id, instanceID, err)
	}
	if err != nil {
		var re *runner.RequestError
		if !errors.As(err, &re) {
			err = fmt.Errorf("%w: %v", ErrRunnerFailed, err)
		}
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
		switch st.Status {
		case state.RunnerShutdown:
			return nil, fmt.Errorf("%w: runner %s is shut down", ErrNoInstance, p.id)
		case state.RunnerFailed:
			return nil, fmt.Errorf("%w: runner %s: %s", ErrRunnerFailed, p.id, st.Error)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("%w: runner %s not ready after %v (status %s)", ErrRunnerFailed, p.id, timeout, st.Status)
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
	if statusEqual(p.status, prev) {
		return
	}
	close(p.changed)
	p.changed = make(chan struct{})
	if err := p.s.cfg.Publish(state.RunnerStatusChanged{NodeID: p.s.cfg.NodeID, Runner: p.status}); err != nil {
		p.s.log.Warn("publish runner status", "runner", p.id, "err", err)
	}
}

func statusEqual(a, b state.Runner) bool {
	ta, tb := a.Transfer, b.Transfer
	a.Transfer, b.Transfer = nil, nil
	return a == b && (ta == nil) == (tb == nil) && (ta == nil || *ta == *tb)
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

// run runs the rank's runner once: a runner that fails stays Failed (its
// instance is then replaced as a whole, see the agent).
func (p *proc) run() {
	defer close(p.done)
	log := p.s.log.With("runner", p.id, "model", p.inst.ModelID)
	err := p.runOnce(log)
	if errors.Is(err, errStopped) {
		p.set(func(r *state.Runner) {
			*r = state.Runner{RunnerID: r.RunnerID, InstanceID: r.InstanceID, NodeID: r.NodeID, Rank: r.Rank,
				Status: state.RunnerShutdown, TotalLayers: r.TotalLayers}
		})
		log.Info("runner shut down")
		return
	}
	log.Warn("runner failed", "err", err)
	p.set(func(r *state.Runner) { r.Status, r.Error, r.Pid, r.Transfer = state.RunnerFailed, err.Error(), 0, nil })
}

// runOnce obtains the rank's file, then runs its runner process until it
// exits or the proc is halted.
func (p *proc) runOnce(log *slog.Logger) error {
	cfg := p.s.cfg
	rg := p.inst.Ranks[p.rank]
	loadStart := time.Now()
	fctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-fctx.Done():
		}
	}()
	lastPub := time.Time{}
	path, info, err := cfg.ModelFile(fctx, p.inst, p.rank, func(pr Progress) {
		now := time.Now()
		if now.Sub(lastPub) < 500*time.Millisecond && pr.Done < pr.Size {
			return
		}
		lastPub = now
		el := now.Sub(loadStart).Seconds()
		t := &state.Transfer{From: pr.From, Bytes: state.Bytes(uint64(pr.Done)), Total: state.Bytes(uint64(pr.Size))}
		if el > 0 {
			t.MBps = state.Float(float64(pr.Done) / 1e6 / el)
			if pr.Done > 0 && pr.Size > pr.Done {
				t.EtaSeconds = state.Float(el * float64(pr.Size-pr.Done) / float64(pr.Done))
			}
		}
		p.set(func(r *state.Runner) { r.Status, r.Transfer = state.RunnerLoading, t })
	})
	cancel()
	if err != nil {
		select {
		case <-p.stop:
			return errStopped
		default:
		}
		return fmt.Errorf("model file for rank %d: %w", p.rank, err)
	}
	var fileSpans []trace.Span
	if info.How != "model" {
		cat, name := "load/shard-build", "cut shard"
		args := trace.Args{}.WithBytes(info.Bytes)
		if info.How == "transfer" {
			cat, name = "load/shard-transfer", "shard from "+info.From
		}
		fileSpans = append(fileSpans, trace.Span{Name: name, Cat: cat, Node: cfg.NodeID, Rank: p.rank,
			StartNs: loadStart.UnixNano(), DurNs: time.Since(loadStart).Nanoseconds(), Args: args})
	}
	args := []string{"runner", "--model", path, "--node", cfg.NodeID, "--node-name", cfg.NodeName,
		"--first-layer", strconv.Itoa(rg.FirstLayer), "--last-layer", strconv.Itoa(rg.LastLayer),
		"--instance", p.inst.InstanceID, "--rank", strconv.Itoa(p.rank), "--ranks", strconv.Itoa(len(p.inst.Ranks))}
	if len(p.inst.Ranks) > 1 {
		args = append(args, "--agent-api", cfg.AgentAPI)
	}
	if cfg.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(cfg.Threads))
	}
	if cfg.ContextLen > 0 {
		args = append(args, "--ctx", strconv.Itoa(cfg.ContextLen))
	}
	cmd := exec.Command(cfg.Exe, args...)
	cmd.Env = append(os.Environ(), TokenEnv+"="+p.token)
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
			if f, err := os.OpenFile(filepath.Join(cfg.LogDir, "runner-"+p.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
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
	log.Info("runner started", "pid", pid, "path", path, "rank", p.rank, "ranks", len(p.inst.Ranks))
	p.set(func(r *state.Runner) {
		r.Status, r.Pid, r.Error, r.LayersLoaded, r.Transfer = state.RunnerIdle, pid, "", 0, nil
	})

	forget := func() {
		p.mu.Lock()
		p.client, p.rankAddr = nil, ""
		p.mu.Unlock()
	}
	kill := func() error {
		forget()
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
		forget()
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
	client := &runner.Client{Addr: addr, Token: p.token}
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
		p.mu.Lock()
		p.rankAddr = h.RankAddr
		p.mu.Unlock()
		status := state.RunnerLoading
		switch h.Status {
		case runner.StatusFailed:
			kill()
			return fmt.Errorf("load %s: %s", path, h.Error)
		case runner.StatusConnecting:
			status = state.RunnerConnecting
		case runner.StatusReady:
			ready = true
		}
		p.set(func(r *state.Runner) {
			r.Status, r.LayersLoaded, r.TotalLayers, r.Transfer = status, h.LayersLoaded, h.TotalLayers, nil
		})
	}
	if cfg.OnLoaded != nil {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		spans, err := client.LoadSpans(lctx)
		cancel()
		if err == nil {
			cfg.OnLoaded(p.inst, p.rank, append(fileSpans, spans...))
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
