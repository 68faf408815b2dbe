package ringbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Stream purposes: the coordinator's control stream to a member (its id
// is the run's), and a rank link to the next member (id: the run's).
const (
	PurposeControl cluster.Purpose = "ring"
	PurposeLink    cluster.Purpose = "ring-link"
)

// Limits.
const (
	// Timeout bounds a whole benchmark run.
	Timeout = 60 * time.Second
	// maxMsg bounds a control frame: a RingStart names at most
	// wire.MaxMembersPerMsg members, a report at most MaxRingRounds hops.
	maxMsg = 64 << 10
	// maxRuns bounds the runs a node takes part in at once (and the rank
	// links waiting for a run that has not started here yet).
	maxRuns = 16
)

// Node is what the benchmark needs of cluster.Node.
type Node interface {
	ID() string
	Members() []cluster.Member
	Links() []cluster.Link
	DialStream(ctx context.Context, peer string, p cluster.Purpose, id string) (net.Conn, error)
	HandleStream(p cluster.Purpose, h cluster.StreamHandler)
}

var _ Node = (*cluster.Node)(nil)

// Config configures a Bench.
type Config struct {
	Node Node
	// OnRank, when set, is called as this node's rank of a run starts; the
	// function it returns (may be nil) is called when the rank is done,
	// with its hop timings (those it got to, on an error too), so that the
	// caller can trace them.
	OnRank func(start wire.RingStart) (done func(rep *wire.RingReport, err error))
	Logger *slog.Logger
}

// Bench runs ring benchmarks and takes part in other nodes' runs. Safe for
// concurrent use.
type Bench struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex      // guards runs
	runs map[string]*run // runs in progress here, by id
}

// run is one benchmark's state on one node.
type run struct {
	inbound chan net.Conn // the rank link from our predecessor
}

// Result is what Run returns.
type Result struct {
	Bench  string    `json:"bench"`
	Order  []string  `json:"order"`
	Size   int       `json:"sizeBytes"`
	Rounds int       `json:"rounds"`
	Hops   []HopStat `json:"hops"`
	// RoundMs is the coordinator's time for the payload to go all round.
	RoundMs []float64 `json:"roundMs"`
	// Reports are every member's raw hop timings (its own clock), and
	// ClockOffsets each member's clock minus the coordinator's, from the
	// link probes, so that a trace can put all on one time line.
	Reports      []*wire.RingReport       `json:"-"`
	ClockOffsets map[string]time.Duration `json:"-"`
}

// HopStat summarises one hop over all rounds.
type HopStat struct {
	From           string  `json:"from"`
	To             string  `json:"to"`
	LatencyMsMin   float64 `json:"latencyMsMin"`
	LatencyMsAvg   float64 `json:"latencyMsAvg"`
	LatencyMsMax   float64 `json:"latencyMsMax"`
	ThroughputMBps float64 `json:"throughputMBps"` // size / average latency
}

// New returns a Bench and registers its stream handlers with cfg.Node.
func New(cfg Config) *Bench {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Bench{cfg: cfg, log: cfg.Logger.With("component", "ringbench"), runs: map[string]*run{}}
	cfg.Node.HandleStream(PurposeControl, b.serveControl)
	cfg.Node.HandleStream(PurposeLink, b.acceptLink)
	return b
}

// Run runs a ring benchmark over all current members, coordinated by this
// node: size bytes, rounds times around; traced unless noTrace. On an
// error after the run started, the result still names the run (Bench,
// Order), so that the caller can account for its trace.
func (b *Bench) Run(ctx context.Context, size, rounds int, noTrace bool) (Result, error) {
	self := b.cfg.Node.ID()
	order := []string{self}
	for _, m := range b.cfg.Node.Members() {
		if m.NodeID != self {
			order = append(order, m.NodeID)
		}
	}
	start := &wire.RingStart{Bench: newBenchID(), Order: order, Size: size, Rounds: rounds, NoTrace: noTrace}
	if err := start.Validate(); err != nil {
		return Result{}, fmt.Errorf("ring bench: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	r, err := b.join(start.Bench)
	if err != nil {
		return Result{}, fmt.Errorf("ring bench: %w", err)
	}
	defer b.leave(start.Bench)
	res := Result{Bench: start.Bench, Order: order, Size: size, Rounds: rounds}
	members, err := b.startMembers(ctx, start)
	// A member that fails (or whose stream ends) fails the run at once,
	// rather than leaving the ring to wait for its timeout.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var wg sync.WaitGroup
	defer func() {
		for _, c := range members {
			c.Close()
		}
		wg.Wait()
	}()
	if err != nil {
		return res, err
	}
	got := map[string]chan *wire.RingReport{}
	for id, c := range members {
		ch := make(chan *wire.RingReport, 1)
		got[id] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := memberReport(ctx, c, start.Bench, id)
			if err != nil {
				fail(fmt.Errorf("ring bench: member %s: %w", id, err))
				return
			}
			ch <- rep
		}()
	}
	roundMs, own, err := b.runRank(ctx, start, r)
	if cause := context.Cause(ctx); cause != nil && ctx.Err() == context.Canceled {
		return res, cause
	}
	if err != nil {
		return res, err
	}
	reports := []*wire.RingReport{own}
	for _, id := range order[1:] {
		select {
		case rep := <-got[id]:
			reports = append(reports, rep)
		case <-ctx.Done():
			return res, context.Cause(ctx)
		}
	}
	res.RoundMs, res.Reports, res.ClockOffsets = roundMs, reports, map[string]time.Duration{}
	for _, l := range b.cfg.Node.Links() {
		if l.Samples > 0 {
			res.ClockOffsets[l.PeerID] = l.ClockOffset
		}
	}
	for _, rep := range reports {
		res.Hops = append(res.Hops, hopStat(rep, size))
	}
	sort.Slice(res.Hops, func(i, j int) bool {
		return slices.Index(order, res.Hops[i].From) < slices.Index(order, res.Hops[j].From)
	})
	return res, nil
}

// memberReport reads a member's report of run bench.
func memberReport(ctx context.Context, c net.Conn, bench, id string) (*wire.RingReport, error) {
	rep, err := readReport(ctx, c)
	switch {
	case err != nil:
		return nil, err
	case rep.Error != "":
		return nil, errors.New(rep.Error)
	case rep.Bench != bench || rep.From != id:
		return nil, fmt.Errorf("report of %s for %s", rep.From, rep.Bench)
	}
	return rep, nil
}

// startMembers opens a control stream to every member but us and sends
// it the run's start. The streams stay open for the members' reports.
func (b *Bench) startMembers(ctx context.Context, start *wire.RingStart) (map[string]net.Conn, error) {
	conns := map[string]net.Conn{}
	for _, id := range start.Order[1:] {
		c, err := b.cfg.Node.DialStream(ctx, id, PurposeControl, start.Bench)
		if err != nil {
			return conns, fmt.Errorf("ring bench: start %s: %w", id, err)
		}
		conns[id] = c
		if err := writeMsg(ctx, c, start); err != nil {
			return conns, fmt.Errorf("ring bench: start %s: %w", id, err)
		}
	}
	return conns, nil
}

// serveControl is a member's side of a run: read the start, run our rank,
// report to the coordinator.
func (b *Bench) serveControl(ctx context.Context, peer, id string, c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	msg, err := readMsg(ctx, c)
	if err != nil {
		b.log.Debug("ring control stream", "from", peer, "err", err)
		return
	}
	start, ok := msg.(*wire.RingStart)
	if !ok || start.Bench != id || start.Order[0] != peer || !slices.Contains(start.Order, b.cfg.Node.ID()) {
		b.log.Warn("ring start refused", "from", peer, "bench", id)
		return
	}
	rep, err := b.member(ctx, start)
	if err != nil {
		rep = &wire.RingReport{Bench: start.Bench, From: b.cfg.Node.ID(), Error: truncate(err.Error(), 1024)}
	}
	if err := writeMsg(ctx, c, rep); err != nil {
		b.log.Debug("ring report", "to", peer, "err", err)
	}
}

// member runs this node's rank of a run another node coordinates.
func (b *Bench) member(ctx context.Context, start *wire.RingStart) (*wire.RingReport, error) {
	r, err := b.join(start.Bench)
	if err != nil {
		return nil, err
	}
	defer b.leave(start.Bench)
	_, rep, err := b.runRank(ctx, start, r)
	return rep, err
}

// join returns the run's state, made here or by an early rank link.
func (b *Bench) join(bench string) (*run, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runLocked(bench)
}

func (b *Bench) runLocked(bench string) (*run, error) {
	r := b.runs[bench]
	if r == nil {
		if len(b.runs) >= maxRuns {
			return nil, fmt.Errorf("%d ring benchmarks already running", len(b.runs))
		}
		r = &run{inbound: make(chan net.Conn, 1)}
		b.runs[bench] = r
	}
	return r, nil
}

// leave forgets a run, closing a rank link nobody took.
func (b *Bench) leave(bench string) {
	b.mu.Lock()
	r := b.runs[bench]
	delete(b.runs, bench)
	b.mu.Unlock()
	if r == nil {
		return
	}
	select {
	case c := <-r.inbound:
		c.Close()
	default:
	}
}

// acceptLink hands an inbound rank link to its run. A link for a run that
// does not start here within Timeout is closed.
func (b *Bench) acceptLink(ctx context.Context, peer, id string, c net.Conn) {
	b.mu.Lock()
	r, err := b.runLocked(id)
	b.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	select {
	case r.inbound <- c:
	default:
		c.Close() // a second link for the same run
		return
	}
	// If no rank takes it (the run never starts here), drop the run.
	time.AfterFunc(Timeout, func() {
		b.mu.Lock()
		stale := b.runs[id] == r
		b.mu.Unlock()
		if stale {
			b.leave(id)
		}
	})
}

func newBenchID() string {
	return fmt.Sprintf("ring-%d", time.Now().UnixNano())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
