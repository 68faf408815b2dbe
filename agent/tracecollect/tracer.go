package tracecollect

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// shipWait bounds shipping one rank's spans of a task to the master, as a
// backstop: a master that makes no progress fails the writes much sooner
// (writeStall), and a slow one only makes them slow.
const shipWait = 10 * time.Minute

// maxErrorText bounds a task's error text in its announcement.
const maxErrorText = 1024

// TracerConfig wires a Tracer. Every field is required but Logger.
type TracerConfig struct {
	// Self and NodeName are this node's id and friendly name.
	Self, NodeName string
	// Node carries trace streams; Links and BytesSent are its link
	// statistics (clock offsets, per-peer traffic).
	Node      Node
	Links     func() []cluster.Link
	BytesSent func() map[string]uint64
	// State names nodes; History holds their memory samples, drawn as
	// counter tracks of every trace.
	State   func() state.State
	History *state.MemoryHistory
	// Traces stores merged traces (on the master).
	Traces *tracestore.Store
	// MergeTimeout is Config.Timeout of the collector.
	MergeTimeout time.Duration
	// SpillDir is Config.SpillDir of the collector: where a task too large
	// for memory goes while it is collected ("": such spans are dropped).
	SpillDir string
	Logger   *slog.Logger
}

// Tracer is this node's part of distributed tracing: it ships the spans
// of its ranks to the master, and, while this node is the master, merges
// every rank's spans into one trace file. Safe for concurrent use.
type Tracer struct {
	cfg       TracerConfig
	log       *slog.Logger
	collector *Collector
	router    *Router
	bg        sync.WaitGroup // shipping off the callers' goroutines
	// bgCtx is the parent of the shipping's contexts; Close cancels it
	// once its grace has passed.
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

// NewTracer returns a tracer and registers its trace stream with the node.
func NewTracer(cfg TracerConfig) *Tracer {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracer{cfg: cfg, log: log.With("component", "tracecollect")}
	t.bgCtx, t.bgCancel = context.WithCancel(context.Background())
	t.collector = New(Config{Timeout: cfg.MergeTimeout, ClockOffsets: t.clockOffsets, Self: cfg.Self, Save: t.save,
		SpillDir: cfg.SpillDir, Logger: log})
	retain := cfg.MergeTimeout
	if retain <= 0 {
		retain = DefaultTimeout
	}
	t.router = NewRouter(cfg.Node, t.collector, retain+resendMargin, log)
	return t
}

// Close waits for shipping in flight, closes the stream to the master and
// saves whatever ranks delivered for traces still being merged.
// Shipping still in flight after grace is abandoned (and logged): a
// master that is not there by then is not coming.
func (t *Tracer) Close(grace time.Duration) {
	done := make(chan struct{})
	go func() { t.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		t.bgCancel()
		<-done
	}
	t.bgCancel()
	t.router.Close()
	t.collector.Close()
}

// resendMargin is kept beyond the merge timeout for resends: the master
// change itself takes FailAfter to be noticed.
const resendMargin = 5 * time.Second

// MasterChanged sends the trace data of tasks still being merged to the
// new master (in the background): the old one may never save them.
func (t *Tracer) MasterChanged() {
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		ctx, cancel := context.WithTimeout(t.bgCtx, shipWait)
		defer cancel()
		t.router.Resend(ctx)
	}()
}

// newShipper starts tracing this node's rank of task. A live shipper
// (one started when the task starts) also samples the node's per-peer
// traffic into link tracks; one for spans taken after the fact does not.
func (t *Tracer) newShipper(task string, rank int, live bool) *Shipper {
	cfg := ShipperConfig{
		Task: task, Rank: rank, Node: t.cfg.Self,
		Send: func(ctx context.Context, c *wire.TraceChunk) error {
			_, err := t.router.Chunk(ctx, c)
			return err
		},
		SpillDir: t.cfg.SpillDir,
		Options:  trace.Options{NodeName: t.cfg.NodeName},
	}
	if live {
		cfg.LinkBytes = t.cfg.BytesSent
	}
	return NewShipper(cfg)
}

// ShipTask sends rank 0's spans and counter samples of a task to the
// master and announces the task with its ranks (rank 0 on this node when
// ranks is empty). It returns at once; the shipping runs in the
// background.
func (t *Tracer) ShipTask(task, kind string, spans []trace.Span, counters []trace.CounterSample, ranks []state.ShardRange, errText string) {
	tr := []wire.TraceRank{{Rank: 0, Node: t.cfg.Self}}
	if len(ranks) > 0 {
		tr = tr[:0]
		for _, rk := range ranks {
			tr = append(tr, wire.TraceRank{Rank: rk.Rank, Node: rk.NodeID})
		}
	}
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		ctx, cancel := context.WithTimeout(t.bgCtx, shipWait)
		defer cancel()
		t.ship(ctx, task, tr[0].Rank, spans, counters, ranks)
		m := &wire.TraceTask{Task: task, Kind: kind, Ranks: tr, Error: truncate(errText, maxErrorText)}
		if _, err := t.router.Task(ctx, m); err != nil {
			t.log.Warn("announce trace", "task", task, "err", err)
		}
	}()
}

// ShipRank ships one rank's spans and counter samples of a task to the
// master (the task's announcement comes from rank 0's node). ranks names
// the nodes of the instance's ranks. It returns at once.
func (t *Tracer) ShipRank(task string, rank int, spans []trace.Span, counters []trace.CounterSample, ranks []state.ShardRange) {
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		ctx, cancel := context.WithTimeout(t.bgCtx, shipWait)
		defer cancel()
		t.ship(ctx, task, rank, spans, counters, ranks)
	}()
}

func (t *Tracer) ship(ctx context.Context, task string, rank int, spans []trace.Span, counters []trace.CounterSample, ranks []state.ShardRange) {
	sh := t.newShipper(task, rank, false)
	sh.Add(spans...)
	sh.AddCounters(linkTracks(t.cfg.Self, counters, spans, func(r int) string {
		for _, rk := range ranks {
			if rk.Rank == r {
				return rk.NodeID
			}
		}
		return ""
	})...)
	if err := sh.Finish(ctx); err != nil {
		t.log.Warn("ship trace", "task", task, "rank", rank, "err", err)
	}
}

// Loaded traces a rank's load as its own one-rank task,
// load-<instance>-r<rank> (supervisor.Config.OnLoaded).
func (t *Tracer) Loaded(in state.Instance, rank int, spans []trace.Span, counters []trace.CounterSample) {
	for i := range spans {
		spans[i].Rank = 0 // one-rank task; the name says which rank
	}
	t.ShipTask(fmt.Sprintf("load-%s-r%d", in.InstanceID, rank), "load", spans, counters, nil, "")
}

// clockOffsets is every peer's clock minus ours, from the link probes.
func (t *Tracer) clockOffsets() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, l := range t.cfg.Links() {
		if l.Samples > 0 {
			out[l.PeerID] = l.ClockOffset
		}
	}
	return out
}

// save stores a merged trace: it names each node's process after the
// node, names link tracks by friendly names, and adds every node's memory
// during the task (from the replicated memory history) as counter tracks.
func (t *Tracer) save(m *Merged, info Info) error {
	tr := m.Trace
	st := t.cfg.State()
	nodes := map[string]bool{}
	for _, n := range info.Ranks {
		nodes[n] = true
	}
	name := func(id string) string {
		if ident, ok := st.NodeIdentities[id]; ok && ident.FriendlyName != "" {
			return fmt.Sprintf("%s (%.8s)", ident.FriendlyName, id)
		}
		return id
	}
	tr.Processes = map[string]string{}
	for id := range nodes {
		tr.Processes[id] = name(id)
	}
	nameLinks(tr.Counters, name)
	if m.FirstNs != 0 {
		tr.Counters = append(tr.Counters, memoryCounters(t.cfg.History, nodes, sharedMachines(st, nodes), t.clockOffsets(), m.FirstNs, m.LastNs)...)
	}
	meta := tracestore.Meta{TaskID: tr.TaskID, Kind: info.Kind, Spans: m.Count, Nodes: len(nodes),
		Partial: len(info.Missing) > 0, MissingRanks: info.Missing, Error: info.Error}
	_, err := t.cfg.Traces.Save(meta, m.WriteChrome)
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
