package supervisor

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/ident"
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

// ErrNoInstance is wrapped when an instance has no runner on this node.
var ErrNoInstance = errors.New("no runner for this instance on this node")

// ErrRunnerFailed is wrapped when a runner died or broke off mid-request.
var ErrRunnerFailed = errors.New("runner failed")

// ShardInfo says how a rank's model file was obtained.
type ShardInfo struct {
	// How is "model" (the whole model, or a shard, on disk here),
	// "built" (cut from it here), "transfer" (received from node From)
	// or "pull" (its tensors fetched from source From).
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
	// DraftThreads are a draft model's threads (0: the runner's default).
	DraftThreads int
	// DraftFile is the path of a model on this node (an instance's draft
	// model, which its rank 0 loads beside it).
	DraftFile func(modelID string) (string, error)
	// ContextShift lets the runners' generations run past the context.
	ContextShift bool
	// GPULayers is how many blocks of each rank go on this node's GPU
	// when the instance does not say (runnerapi.GPUAuto: as many as fit;
	// 0, the zero value: none). NoGPU keeps every rank on the CPU whatever
	// the instance says (the agent's --gpu off); GPUSoftware lets a
	// software device (Mesa's lavapipe) take blocks (--gpu-software).
	GPULayers          runnerapi.GPULayers
	NoGPU, GPUSoftware bool
	// GPUMemory caps the GPU memory each runner takes (bytes; 0: all the
	// device has free): the runner's --gpu-memory.
	GPUMemory uint64
	// ModelFile returns the file rank loads: the model itself, or its
	// shard (cut here, or received from another node while progress is
	// called).
	ModelFile func(ctx context.Context, in state.Instance, rank int, progress func(Progress)) (string, ShardInfo, error)
	// Publish sends a runner's status changes into the cluster state.
	Publish func(state.Event) error
	// OnLoaded, when set, gets the spans of a rank's load (shard transfer
	// included), once per successful load, and the MB/s track of its
	// shard's transfer or pull.
	OnLoaded func(in state.Instance, rank int, spans []trace.Span, counters []trace.CounterSample)
	// ReadyTimeout defaults to DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Owns says whether this node's own record (its ownership ledger)
	// holds an instance, and Alive whether a node is a member now (heard
	// from within the cluster's fail-after). A runner whose instance is
	// missing from the state while its owner is alive is kept (see
	// Reconcile). Nil: never and nobody.
	Owns  func(instanceID string) bool
	Alive func(nodeID string) bool
	// DirectHost, when set, is the host a tensor-parallel runner's direct
	// links are accepted on (a listener on it, granted to the runner):
	// the host of the agent's peer address. LinkSecret derives each
	// instance's link secret (from the cluster key). Either unset: a
	// group's links go through the agents.
	DirectHost string
	LinkSecret func(instanceID string) []byte
	// DirectPorts bound the direct listeners' ports ({0, 0}: any).
	DirectPorts [2]int
	// MissingGrace defaults to DefaultMissingGrace.
	MissingGrace time.Duration
	// Now is the clock the grace and the memory of deletions are counted
	// on (nil: time.Now); a test advances its own past them.
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultMissingGrace bounds how long a runner is kept whose instance is
// missing from the state while its owner, another node, is alive: a
// snapshot from a master that had lost the instance (after a partition,
// say) is repaired by the owner's assertion within a few seconds; an
// instance deleted while this node missed the event is not coming back.
const DefaultMissingGrace = 10 * time.Second

// Supervisor owns this node's runner processes.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex       // guards procs, stopped and closed
	procs map[string]*proc // by runner id
	// stopped are instances Stop took down: Reconcile does not start
	// them again while the state still shows them.
	stopped map[string]bool
	// deleted are instances whose deletion this node applied (Deleted),
	// and when; missing those with runners here that the state lacks,
	// since when.
	deleted map[string]time.Time
	missing map[string]time.Time
	closed  bool
	wg      sync.WaitGroup

	directMu sync.Mutex // guards direct
	direct   map[string]directTotals
}

// New returns a supervisor with no runners.
func New(cfg Config) *Supervisor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.MissingGrace <= 0 {
		cfg.MissingGrace = DefaultMissingGrace
	}
	if cfg.Owns == nil {
		cfg.Owns = func(string) bool { return false }
	}
	if cfg.Alive == nil {
		cfg.Alive = func(string) bool { return false }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger.With("component", "supervisor"), procs: map[string]*proc{}, stopped: map[string]bool{},
		deleted: map[string]time.Time{}, missing: map[string]time.Time{}}
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
	client   *runnerapi.Client // set while the runner is Ready
	rankAddr string            // where the runner accepts its inbound rank link
	meshAddr string            // where a tensor-parallel runner accepts its group's links
	changed  chan struct{}     // closed and replaced on every change
	inflight int
	stopping bool
}

// Reconcile starts a runner for every rank placed on this node of every
// live instance, and stops those whose instance has failed or is gone.
// Gone means deleted (an InstanceDeleted this node applied, see Deleted),
// or missing from the state while its owner is not alive. A snapshot
// that lacks an instance whose owner is alive (this node itself, whose
// record still has it, or a member heard from within fail-after) stops
// nothing: the owner asserts the instance again within seconds, and a
// reload of the model for nothing is what that would cost. Another
// owner's instance gets MissingGrace to come back.
func (s *Supervisor) Reconcile(st state.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	now := s.cfg.Now()
	for id, in := range st.Instances {
		// A deleted instance a stale snapshot shows a moment longer
		// starts nothing.
		if _, gone := s.deleted[id]; gone || s.stopped[id] || in.Status == state.InstanceStatusFailed {
			continue
		}
		// The state checks every id that reaches it; the runner's log is
		// named after this one all the same, so it is checked here too
		// (at Debug: reconciling runs on every change of the state).
		if err := ident.ValidInstanceID(id); err != nil {
			s.log.Debug("instance not started", "err", err)
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
		id := p.inst.InstanceID
		in, ok := st.Instances[id]
		switch {
		case ok && in.Status != state.InstanceStatusFailed:
			delete(s.missing, id)
			continue
		case !ok && s.keepMissing(p.inst, now):
			continue
		}
		delete(s.procs, rid)
		p.halt()
	}
	for id := range s.stopped {
		if _, ok := st.Instances[id]; !ok {
			delete(s.stopped, id)
		}
	}
	running := map[string]bool{}
	for _, p := range s.procs {
		running[p.inst.InstanceID] = true
	}
	for id := range s.missing {
		if _, ok := st.Instances[id]; ok || !running[id] {
			delete(s.missing, id)
		}
	}
	for id, at := range s.deleted {
		if now.Sub(at) > deletedKeep {
			delete(s.deleted, id)
		}
	}
}

// deletedKeep bounds how long a deletion is remembered: an instance id is
// never used again, so this only bounds the map.
const deletedKeep = 10 * time.Minute

// keepMissing says whether a runner of in, which the state lacks, stays
// (see Reconcile). It notes since when the instance is missing and logs
// the first time it keeps one.
func (s *Supervisor) keepMissing(in state.Instance, now time.Time) bool {
	id := in.InstanceID
	if _, gone := s.deleted[id]; gone {
		return false
	}
	since, seen := s.missing[id]
	if !seen {
		since = now
		s.missing[id] = now
	}
	var keep bool
	var why string
	switch {
	case in.NodeID == s.cfg.NodeID:
		keep, why = s.cfg.Owns(id), "this node owns it"
	default:
		keep, why = s.cfg.Alive(in.NodeID) && now.Sub(since) < s.cfg.MissingGrace, "its owner is alive"
	}
	if keep && !seen {
		s.log.Info("instance missing from the state; its runners stay until its owner asserts it again", "instance", id, "owner", in.NodeID, "why", why)
	}
	return keep
}

// Deleted tells the supervisor of instance deletions this node applied:
// their runners stop at the next Reconcile, whoever owns them.
func (s *Supervisor) Deleted(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	for _, id := range ids {
		s.deleted[id] = now
	}
}

// Stop stops the instance's runners on this node (publishing Shutdown)
// and waits for them: the instance is being deleted, so they never start
// again.
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
	s.deleted[instanceID] = s.cfg.Now()
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
func (s *Supervisor) DialRank(ctx context.Context, instanceID string, rank int, kind LinkKind) (net.Conn, error) {
	p := s.proc(RunnerID(instanceID, rank))
	if p == nil {
		return nil, fmt.Errorf("%w: rank %d of %s", ErrNoInstance, rank, instanceID)
	}
	p.mu.Lock()
	addr := p.rankAddr
	if kind == MeshLink {
		addr = p.meshAddr
	}
	p.mu.Unlock()
	if addr == "" {
		return nil, fmt.Errorf("rank %d of %s is not listening yet", rank, instanceID)
	}
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := runnerapi.SendAuth(c, p.token); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Complete runs a completion on rank 0 of an instance on this node,
// waiting (at most ReadyTimeout) for the pipeline to be Ready. The runner
// serves several at once (its slots) and queues the rest in arrival order.
func (s *Supervisor) Complete(ctx context.Context, instanceID string, req runnerapi.CompletionRequest, onPiece func(runnerapi.Piece) error) (*runnerapi.Done, error) {
	p, c, err := s.rank0(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	p.begin()
	var done *runnerapi.Done
	defer func() { p.end(done) }()
	done, err = c.Complete(ctx, req, onPiece)
	if errors.Is(err, runnerapi.ErrStreamBroken) {
		return done, fmt.Errorf("%w: runner %s (instance %s) broke off mid-completion: %v", ErrRunnerFailed, p.id, instanceID, err)
	}
	if err != nil {
		var re *runnerapi.RequestError
		if !errors.As(err, &re) {
			err = fmt.Errorf("%w: %v", ErrRunnerFailed, err)
		}
	}
	return done, err
}

// rank0 is the runner of an instance's rank 0 on this node, once Ready
// (waiting at most ReadyTimeout), and its client.
func (s *Supervisor) rank0(ctx context.Context, instanceID string) (*proc, *runnerapi.Client, error) {
	rid := RunnerID(instanceID, 0)
	p := s.proc(rid)
	for deadline := time.Now().Add(appearWait); p == nil && time.Now().Before(deadline); p = s.proc(rid) {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if p == nil {
		return nil, nil, fmt.Errorf("%w: %s", ErrNoInstance, instanceID)
	}
	c, err := p.waitReady(ctx, s.cfg.ReadyTimeout)
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

// Embed runs an embedding request on rank 0 of an instance on this node,
// as Complete runs a completion.
func (s *Supervisor) Embed(ctx context.Context, instanceID string, req runnerapi.EmbedRequest) (*runnerapi.EmbedResponse, error) {
	p, c, err := s.rank0(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	p.begin()
	defer p.end(nil)
	res, err := c.Embed(ctx, req)
	if err != nil {
		var re *runnerapi.RequestError
		if !errors.As(err, &re) {
			err = fmt.Errorf("%w: runner %s (instance %s): %v", ErrRunnerFailed, p.id, instanceID, err)
		}
	}
	return res, err
}
