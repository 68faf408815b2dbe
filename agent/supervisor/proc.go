package supervisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

func (p *proc) waitReady(ctx context.Context, timeout time.Duration) (*runnerapi.Client, error) {
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

// end ends a request; done (nil if none) gives the runner's measured
// decode speed and a tensor-parallel leader's mean all-reduce, kept in
// its status (published with the next change).
func (p *proc) end(done *runnerapi.Done) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	dec, reduce := measuredOf(done)
	if dec > 0 {
		p.status.DecodeTokPerSec, p.status.ReduceMicros = dec, reduce
	}
	if p.inflight == 0 && p.status.Status == state.RunnerRunning {
		p.setLocked(func(r *state.Runner) { r.Status = state.RunnerReady })
	}
}

// measuredOf is a finished request's decode tok/s (0 when it decoded
// fewer than 8 tokens: too few to say) and the mean of its decode
// all-reduces in µs (0 when there were none).
func measuredOf(done *runnerapi.Done) (decode, reduceMicros float64) {
	if done == nil || done.CompletionTokens < 8 {
		return 0, 0
	}
	var n, ns int64
	for _, sp := range done.Spans {
		if sp.Name == "all-reduce" && sp.Cat == "decode/comms" {
			n++
			ns += sp.DurNs
		}
	}
	if n > 0 {
		reduceMicros = float64(ns) / float64(n) / 1e3
	}
	return done.DecodeTokPerSec(), reduceMicros
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
	oa, ob := a.Offload, b.Offload
	a.Transfer, b.Transfer = nil, nil
	a.Offload, b.Offload = nil, nil
	return a == b && (ta == nil) == (tb == nil) && (ta == nil || *ta == *tb) && offloadEqual(oa, ob)
}

// offloadEqual compares two Offloads by value (their devices too).
func offloadEqual(a, b *runnerapi.Offload) bool {
	if a == nil || b == nil {
		return a == b
	}
	da, db := a.Device, b.Device
	x, y := *a, *b
	x.Device, y.Device = nil, nil
	return x == y && (da == nil) == (db == nil) && (da == nil || *da == *db)
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
	p.set(func(r *state.Runner) {
		r.Status, r.Error, r.Pid, r.Transfer, r.Offload = state.RunnerFailed, err.Error(), 0, nil, nil
	})
}

// runOnce obtains the rank's file, then runs its runner process until it
// exits or the proc is halted.
func (p *proc) runOnce(log *slog.Logger) error {
	loadStart := time.Now()
	path, fileSpans, fileCounters, err := p.modelFile(loadStart)
	if err != nil {
		return err
	}
	draft := ""
	if p.inst.DraftModel != "" && p.rank == 0 {
		if p.s.cfg.DraftFile == nil {
			return fmt.Errorf("draft model %s: this node does not serve draft models", p.inst.DraftModel)
		}
		if draft, err = p.s.cfg.DraftFile(p.inst.DraftModel); err != nil {
			return fmt.Errorf("draft model %s: %w", p.inst.DraftModel, err)
		}
	}
	c, err := p.start(path, draft)
	if err != nil {
		return err
	}
	defer c.closeLog()
	log.Info("runner started", "pid", c.pid, "path", path, "rank", p.rank, "ranks", len(p.inst.Ranks))
	p.set(func(r *state.Runner) {
		r.Status, r.Pid, r.Error, r.LayersLoaded, r.Transfer, r.LinkPort, r.Offload = state.RunnerIdle, c.pid, "", 0, nil, c.linkPort, nil
	})
	client, err := p.awaitReady(c, path)
	if err != nil {
		return err
	}
	if cfg := p.s.cfg; cfg.OnLoaded != nil {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		spans, err := client.LoadSpans(lctx)
		cancel()
		if err == nil {
			cfg.OnLoaded(p.inst, p.rank, append(fileSpans, spans...), fileCounters)
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
	log.Info("runner ready", "pid", c.pid, "addr", client.Addr)
	var mesh <-chan time.Time // a group's links: polled for their traffic
	if p.inst.Shape().TensorParallel() {
		t := time.NewTicker(meshEvery)
		defer t.Stop()
		mesh = t.C
	}
	seen := map[int][2]uint64{}
	for {
		select {
		case err := <-c.exited:
			return p.died(c, err)
		case <-p.stop:
			return p.kill(c)
		case <-mesh:
			p.meshTraffic(client, seen)
		}
	}
}

// modelFile obtains the file the rank loads, publishing transfer progress
// (at most every 0.5 s), and the span of cutting or fetching it, with the
// MB/s track of the bytes it received (transferSample).
func (p *proc) modelFile(loadStart time.Time) (string, []trace.Span, []trace.CounterSample, error) {
	cfg := p.s.cfg
	fctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-fctx.Done():
		}
	}()
	lastPub := time.Time{}
	got := []trace.CounterSample{{TsNs: loadStart.UnixNano()}} // bytes in so far
	path, info, err := cfg.ModelFile(fctx, p.inst, p.rank, func(pr Progress) {
		now := time.Now()
		if now.UnixNano()-got[len(got)-1].TsNs >= int64(transferSample) {
			got = append(got, trace.CounterSample{TsNs: now.UnixNano(), Value: float64(pr.Done)})
		}
		if now.Sub(lastPub) < 500*time.Millisecond && pr.Done < pr.Size {
			return
		}
		lastPub = now
		t := transferOf(pr, now.Sub(loadStart).Seconds())
		p.set(func(r *state.Runner) { r.Status, r.Transfer = state.RunnerLoading, t })
	})
	cancel()
	if err != nil {
		select {
		case <-p.stop:
			return "", nil, nil, errStopped
		default:
		}
		return "", nil, nil, fmt.Errorf("model file for rank %d: %w", p.rank, err)
	}
	if info.How == "model" {
		return path, nil, nil, nil
	}
	cat, name, track := "load/shard-build", "cut shard", ""
	switch info.How {
	case "transfer":
		cat, name, track = "load/shard-transfer", "shard from "+info.From, "link "+info.From+"→"+cfg.NodeID
	case "pull":
		cat, name, track = "load/shard-pull", "pull from "+info.From, "pull "+info.From
	}
	got = append(got, trace.CounterSample{TsNs: time.Now().UnixNano(), Value: float64(info.Bytes)})
	return path, []trace.Span{{Name: name, Cat: cat, Node: cfg.NodeID, Rank: p.rank,
			StartNs: loadStart.UnixNano(), DurNs: time.Since(loadStart).Nanoseconds(), Args: trace.Args{}.WithBytes(info.Bytes)}},
		rateTrack(cfg.NodeID, track, got), nil
}

// transferSample is how often a shard's transfer is sampled for its
// load trace's MB/s track.
const transferSample = 100 * time.Millisecond

// rateTrack is the MB/s track of a shard's bytes in so far (none for an
// unnamed track: a shard cut here).
func rateTrack(node, track string, got []trace.CounterSample) []trace.CounterSample {
	if track == "" {
		return nil
	}
	return trace.RateTrack(node, track, got)
}

// transferOf is a shard transfer's progress as the state shows it.
func transferOf(pr Progress, elapsed float64) *state.Transfer {
	t := &state.Transfer{From: pr.From, Bytes: state.Bytes(uint64(pr.Done)), Total: state.Bytes(uint64(pr.Size))}
	if elapsed > 0 {
		t.MBps = state.Float(float64(pr.Done) / 1e6 / elapsed)
		if pr.Done > 0 && pr.Size > pr.Done {
			t.EtaSeconds = state.Float(elapsed * float64(pr.Size-pr.Done) / float64(pr.Done))
		}
	}
	return t
}

// child is a started runner process.
type child struct {
	cmd    *exec.Cmd
	pid    int
	stdin  io.Closer
	exited chan error  // cmd.Wait's result
	lines  chan string // the address the runner listens on
	tail   *tailWriter // its last stderr lines
	log    *os.File    // its log file, if any
	// linkPort is the port of its direct-link listener (0: none).
	linkPort int
}

func (c *child) closeLog() {
	if c.log != nil {
		c.log.Close()
	}
}

// args are the runner's command line for this rank (draft: rank 0's draft
// model's file, "" for none).
func (p *proc) args(path, draft string) []string {
	cfg := p.s.cfg
	rg := p.inst.Ranks[p.rank]
	sh := p.inst.Shape()
	args := []string{"runner", "--model", path, "--node", cfg.NodeID, "--node-name", cfg.NodeName,
		"--first-layer", strconv.Itoa(rg.FirstLayer), "--last-layer", strconv.Itoa(rg.LastLayer), "--instance", p.inst.InstanceID}
	// Its stage, and of a tensor-parallel group its slice; the links
	// go through the agents.
	args = append(args, sh.RunnerArgs(p.rank)...)
	if sh.Ranks() > 1 {
		args = append(args, "--agent-api", cfg.AgentAPI)
	}
	switch {
	case cfg.Threads > 0:
		args = append(args, "--threads", strconv.Itoa(cfg.Threads))
	case sh.TensorParallel() && runtime.NumCPU() > 1:
		// A tensor-parallel rank sums inside its graph while ggml's other
		// threads spin at the barrier, and the agent must relay the sum's
		// bytes meanwhile: leave it a core (with every core computing, an
		// all-reduce waited for the scheduler, 12 ms each, on 2 cores).
		args = append(args, "--threads", strconv.Itoa(runtime.NumCPU()-1))
	}
	if cfg.ContextLen > 0 {
		args = append(args, "--ctx", strconv.Itoa(cfg.ContextLen))
	}
	if cfg.ContextShift {
		args = append(args, "--context-shift")
	}
	gpu := p.gpuLayers()
	args = append(args, "--gpu-layers", gpu.String())
	if cfg.GPUSoftware && gpu != 0 {
		args = append(args, "--gpu-software")
	}
	if cfg.GPUMemory > 0 && gpu != 0 {
		args = append(args, "--gpu-memory", strconv.FormatUint(max(1, cfg.GPUMemory>>20), 10)+"MiB")
	}
	if p.inst.Parallel > 1 {
		args = append(args, "--parallel", strconv.Itoa(p.inst.Parallel))
	}
	if draft != "" {
		args = append(args, "--draft-model", draft, "--draft-id", p.inst.DraftModel)
		if cfg.DraftThreads > 0 {
			args = append(args, "--draft-threads", strconv.Itoa(cfg.DraftThreads))
		}
	}
	if sp := p.inst.Speculative; sp != nil && p.rank == 0 {
		b, _ := json.Marshal(sp)
		args = append(args, "--speculative", string(b))
	}
	return args
}

// gpuLayers is how many of the rank's blocks its runner puts on the GPU:
// none on a node without (NoGPU), else as the instance says, else as the
// node does.
func (p *proc) gpuLayers() runnerapi.GPULayers {
	cfg := p.s.cfg
	switch {
	case cfg.NoGPU:
		return 0
	case p.inst.GPULayers != nil:
		return *p.inst.GPULayers
	}
	return cfg.GPULayers
}

// start starts the runner process on path (draft: its draft model), its
// stderr going to its log file and a tail kept for errors.
func (p *proc) start(path, draft string) (*child, error) {
	cfg := p.s.cfg
	cmd := exec.Command(cfg.Exe, p.args(path, draft)...)
	cmd.Env = append(os.Environ(), runnerapi.TokenEnv+"="+p.token)
	setParentDeath(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, exited: make(chan error, 1), lines: make(chan string, 1), tail: &tailWriter{max: tailLines}}
	var logw io.Writer = c.tail
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o700); err == nil {
			if f, err := os.OpenFile(filepath.Join(cfg.LogDir, "runner-"+p.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
				c.log = f
				logw = io.MultiWriter(f, c.tail)
			}
		}
	}
	cmd.Stderr = logw
	grant, err := p.grantDirect(cmd)
	if err != nil {
		c.closeLog()
		return nil, err
	}
	err = cmd.Start()
	if grant != nil {
		c.linkPort = grant.port
		grant.close() // the runner holds its own copy
	}
	if err != nil {
		c.closeLog()
		return nil, fmt.Errorf("start runner: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), runnerapi.ListenPrefix); ok {
				select {
				case c.lines <- addr:
				default:
				}
			}
		}
	}()
	go func() { c.exited <- cmd.Wait() }()
	c.pid = cmd.Process.Pid
	return c, nil
}

// awaitReady waits for the runner's address, then polls its health until
// it is Ready, publishing its loading progress.
func (p *proc) awaitReady(c *child, path string) (*runnerapi.Client, error) {
	var addr string
	select {
	case addr = <-c.lines:
	case err := <-c.exited:
		return nil, p.died(c, err)
	case <-p.stop:
		return nil, p.kill(c)
	case <-time.After(listenTimeout):
		c.cmd.Process.Kill()
		<-c.exited
		return nil, fmt.Errorf("runner (pid %d) printed no address within %v", c.pid, listenTimeout)
	}
	client := &runnerapi.Client{Addr: addr, Token: p.token}
	tick := time.NewTicker(healthEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-c.exited:
			return nil, p.died(c, err)
		case <-p.stop:
			return nil, p.kill(c)
		case <-tick.C:
		}
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := client.Health(hctx)
		cancel()
		if err != nil {
			continue // not answering yet; a dead process shows on exited
		}
		p.mu.Lock()
		p.rankAddr, p.meshAddr = h.RankAddr, h.MeshAddr
		p.mu.Unlock()
		status := state.RunnerLoading
		switch h.Status {
		case runnerapi.StatusFailed:
			p.kill(c)
			return nil, fmt.Errorf("load %s: %s", path, h.Error)
		case runnerapi.StatusConnecting:
			status = state.RunnerConnecting
		}
		p.set(func(r *state.Runner) {
			r.Status, r.LayersLoaded, r.TotalLayers, r.Transfer = status, h.LayersLoaded, h.TotalLayers, nil
			// Where its blocks went, from the load on (the rank's
			// links may still be connecting).
			r.Offload = h.Offload
		})
		if h.Status == runnerapi.StatusReady {
			return client, nil
		}
	}
}

// forget drops the runner's client and rank address: it is going away.
func (p *proc) forget() {
	p.mu.Lock()
	p.client, p.rankAddr, p.meshAddr = nil, "", ""
	p.mu.Unlock()
}

// kill stops the runner (SIGTERM, then SIGKILL after stopGrace).
func (p *proc) kill(c *child) error {
	p.forget()
	c.stdin.Close()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(stopGrace):
		c.cmd.Process.Kill()
		<-c.exited
	}
	return errStopped
}

// died is the error of a runner that exited by itself, with its last
// output.
func (p *proc) died(c *child, err error) error {
	p.forget()
	msg := fmt.Sprintf("runner (pid %d) exited: %v", c.pid, err)
	if t := c.tail.String(); t != "" {
		msg += "; last output: " + t
	}
	return errors.New(msg)
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
