// Package tracecollect turns the spans that every rank of a traced task ships
// to the master into one trace. The master merges when all the ranks the
// task's owner announced have delivered their last chunk, or after a
// timeout with the others recorded as missing; each node's timestamps are
// moved onto the master's clock by that node's probed clock offset.
package tracecollect

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Defaults for Config.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultOrphanTimeout = 2 * time.Minute
	DefaultMaxTasks      = 64
	// DefaultTaskSpans is how many spans one task holds in memory before
	// they go to its spill file (about 60 MB).
	DefaultTaskSpans = 512 << 10
	// DefaultMaxSpillBytes bounds one task's spill file (about 500 M
	// spans); past it, spans are dropped, counted and logged.
	DefaultMaxSpillBytes = 8 << 30
	// recentlyMerged bounds the merged task ids remembered to name late
	// chunks in the log.
	recentlyMerged = 256
)

// Info is what the collector knows about a merged task besides its spans.
type Info struct {
	Kind string
	// Ranks is every rank's node, as announced (or as the chunks said, for
	// a task never announced).
	Ranks map[int]string
	// Missing lists the ranks that never delivered their last chunk (or lost
	// one on the way); their spans so far are in the trace.
	Missing []int
	// Dropped counts spans lost to limits (the ranks' recorders and ours).
	Dropped uint64
	// Error is the task's failure as its owner reported it.
	Error string
	// Announced is false for a task whose owner never sent a TraceTask:
	// then Missing cannot name anyone.
	Announced bool
}

// Config configures a Collector. Save is required.
type Config struct {
	// Timeout is how long a merge waits for ranks still missing, counted
	// from the task's announcement and again from every chunk of it that
	// comes: a slow but working link never makes a rank missing.
	Timeout time.Duration
	// OrphanTimeout is how long chunks of a task never announced are kept
	// before they are saved as they are.
	OrphanTimeout time.Duration
	// MaxTasks bounds the tasks collected at once; MaxSpans the spans held
	// in memory for all of them together, and TaskSpans for one. Past them,
	// a task's spans go to its spill file in SpillDir; with no SpillDir,
	// they are dropped (counted, and logged when merged). Memory stays
	// bounded whatever peers send; the disk is bounded by MaxSpillBytes a
	// task.
	MaxTasks      int
	MaxSpans      int
	TaskSpans     int
	SpillDir      string
	MaxSpillBytes int64
	// ClockOffsets returns every peer's clock minus ours; Self is our node
	// id (no offset needed).
	ClockOffsets func() map[string]time.Duration
	Self         string
	// Save stores a merged trace. It is called once per task, from no
	// particular goroutine, with no lock held.
	Save   func(m *Merged, info Info) error
	Logger *slog.Logger
}

// Collector is safe for concurrent use.
type Collector struct {
	cfg Config
	log *slog.Logger

	merging sync.WaitGroup // merges running off the caller's goroutine

	mu      sync.Mutex // guards the fields below
	tasks   map[string]*pending
	held    int               // spans held in tasks
	merged  map[string]Result // recently merged, for Wait and late chunks
	order   []string          // merged ids, oldest first
	waiters map[string][]chan Result
	closed  bool
}

// Result is the outcome of one merge.
type Result struct {
	Task    string
	Spans   int
	Missing []int
	Err     error // the save's error
}

type pending struct {
	task      string
	kind      string
	errText   string
	announced bool
	ranks     map[int]string // rank → node
	got       map[int]*rankData
	spans     int // in memory
	spilled   int // sent to the spill file (written, or being written)
	dropped   uint64
	timer     *time.Timer

	// inflight counts spill writes under way: the merge waits for them.
	// io guards the fields below (never held while taking the
	// collector's mu).
	inflight     sync.WaitGroup
	io           sync.Mutex
	spill        *spill
	spillDropped uint64 // spans a spill could not write
	spillErr     error
	threads      map[trace.Thread]bool // of the spilled spans
}

// spillJob is one rank's spans on their way to the spill file.
type spillJob struct {
	rank  int
	node  string
	spans []trace.Span
}

type rankData struct {
	node    string
	nextSeq int
	final   bool
	gap     bool // a chunk went missing: the rank's spans are incomplete
	// spans are the chunks' spans as decoded, chunk by chunk: appending
	// them to one slice would copy a million spans at a time as it grew,
	// and a copy that long is not preempted (other goroutines, heartbeats
	// among them, wait for it).
	spans    [][]trace.Span
	counters []trace.CounterSample
	// names keeps one copy of each span name, category and lane: a rank's
	// million spans repeat a few dozen, and a copy per span would leave
	// the GC millions of strings to mark while the trace is held.
	names map[string]string
}

// maxNames bounds a rank's interned strings; past it, a span keeps its own.
const maxNames = 1 << 16

func (rd *rankData) intern(s string) string {
	if v, ok := rd.names[s]; ok {
		return v
	}
	if len(rd.names) < maxNames {
		if rd.names == nil {
			rd.names = map[string]string{}
		}
		rd.names[s] = s
	}
	return s
}

// New returns a collector.
func New(cfg Config) *Collector {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.OrphanTimeout <= 0 {
		cfg.OrphanTimeout = DefaultOrphanTimeout
	}
	if cfg.MaxTasks <= 0 {
		cfg.MaxTasks = DefaultMaxTasks
	}
	if cfg.MaxSpans <= 0 {
		cfg.MaxSpans = trace.DefaultMaxBuffered
	}
	if cfg.TaskSpans <= 0 {
		cfg.TaskSpans = min(DefaultTaskSpans, cfg.MaxSpans)
	}
	if cfg.MaxSpillBytes <= 0 {
		cfg.MaxSpillBytes = DefaultMaxSpillBytes
	}
	if cfg.SpillDir != "" {
		cleanSpillDir(cfg.SpillDir)
	}
	if cfg.ClockOffsets == nil {
		cfg.ClockOffsets = func() map[string]time.Duration { return nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Collector{cfg: cfg, log: cfg.Logger.With("component", "tracecollect"),
		tasks: map[string]*pending{}, merged: map[string]Result{}, waiters: map[string][]chan Result{}}
}

// pendingLocked returns the task's pending merge, creating it (with the
// orphan timer) if there is room.
func (c *Collector) pendingLocked(task string) (*pending, error) {
	if p := c.tasks[task]; p != nil {
		return p, nil
	}
	if c.closed {
		return nil, fmt.Errorf("trace %s: collector closed", task)
	}
	if _, ok := c.merged[task]; ok {
		return nil, fmt.Errorf("trace %s: already merged; late data dropped", task)
	}
	if len(c.tasks) >= c.cfg.MaxTasks {
		return nil, fmt.Errorf("trace %s: %d traces already being collected", task, len(c.tasks))
	}
	p := &pending{task: task, ranks: map[int]string{}, got: map[int]*rankData{}}
	p.timer = time.AfterFunc(c.cfg.OrphanTimeout, func() { c.expire(p) })
	c.tasks[task] = p
	return p, nil
}

// Task records that task m.Task has ended with m.Ranks: it merges now if
// all of them have delivered, else when they have or after Timeout.
func (c *Collector) Task(from string, m *wire.TraceTask) error {
	c.mu.Lock()
	p, err := c.pendingLocked(m.Task)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	if p.announced {
		c.mu.Unlock()
		return fmt.Errorf("trace %s: announced twice (by %s)", m.Task, from)
	}
	p.announced, p.kind, p.errText = true, m.Kind, m.Error
	for _, r := range m.Ranks {
		if d := p.got[r.Rank]; d != nil && d.node != r.Node {
			// A node sent spans as a rank the owner gave to another node.
			c.log.Warn("trace chunk from the wrong node: dropped", "task", m.Task, "rank", r.Rank, "from", d.node, "want", r.Node)
			n := 0
			for _, sp := range d.spans {
				n += len(sp)
			}
			p.spans -= n
			c.held -= n
			delete(p.got, r.Rank)
		}
		p.ranks[r.Rank] = r.Node
	}
	if c.completeLocked(p) {
		c.merging.Add(1) // under mu, so that Close's Wait comes after it
		c.mu.Unlock()
		c.mergeAsync(p)
		return nil
	}
	p.timer.Stop()
	p.timer = time.AfterFunc(c.cfg.Timeout, func() { c.expire(p) })
	c.mu.Unlock()
	return nil
}

// chunkData is the JSON payload of a wire.TraceChunk.
type chunkData struct {
	Spans    []trace.Span          `json:"spans"`
	Counters []trace.CounterSample `json:"counters,omitempty"`
	// Dropped counts spans the rank's recorder lost to its buffer limit.
	Dropped uint64 `json:"dropped,omitempty"`
}

// Chunk adds one chunk from node from. Spans are taken as from's, of the
// chunk's rank, whatever they claim.
func (c *Collector) Chunk(from string, m *wire.TraceChunk) error {
	var d chunkData
	if err := json.Unmarshal(m.Data, &d); err != nil {
		return fmt.Errorf("trace %s rank %d chunk %d from %s: %w", m.Task, m.Rank, m.Seq, from, err)
	}
	for i := range d.Spans {
		s := &d.Spans[i]
		if s.DurNs < 0 {
			return fmt.Errorf("trace %s rank %d chunk %d from %s: span %d has duration %d", m.Task, m.Rank, m.Seq, from, i, s.DurNs)
		}
		s.Node, s.Rank = from, m.Rank
	}
	for i := range d.Counters {
		d.Counters[i].Node = from
	}
	c.mu.Lock()
	p, err := c.pendingLocked(m.Task)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	if want, ok := p.ranks[m.Rank]; ok && want != from {
		c.mu.Unlock()
		return fmt.Errorf("trace %s: rank %d is %s's, not %s's", m.Task, m.Rank, want, from)
	}
	rd := p.got[m.Rank]
	if rd == nil {
		rd = &rankData{node: from}
		p.got[m.Rank] = rd
	}
	switch {
	case rd.node != from:
		c.mu.Unlock()
		return fmt.Errorf("trace %s: rank %d is %s's, not %s's", m.Task, m.Rank, rd.node, from)
	case rd.final:
		c.mu.Unlock()
		return fmt.Errorf("trace %s: rank %d sent chunk %d after its last", m.Task, m.Rank, m.Seq)
	case m.Seq != rd.nextSeq:
		rd.gap = true
		c.log.Warn("trace chunk out of sequence", "task", m.Task, "rank", m.Rank, "seq", m.Seq, "want", rd.nextSeq)
	}
	rd.nextSeq = m.Seq + 1
	for i := range d.Spans {
		sp := &d.Spans[i]
		sp.Name, sp.Cat, sp.Lane = rd.intern(sp.Name), rd.intern(sp.Cat), rd.intern(sp.Lane)
	}
	jobs := c.makeRoomLocked(p, m.Rank, from, &d.Spans)
	p.dropped += d.Dropped
	p.spans += len(d.Spans)
	c.held += len(d.Spans)
	if len(d.Spans) > 0 {
		rd.spans = append(rd.spans, d.Spans)
	}
	rd.counters = append(rd.counters, d.Counters...)
	rd.final = m.Final
	if p.announced && !m.Final {
		p.timer.Reset(c.cfg.Timeout) // progress: the wait counts from now
	}
	done := m.Final && c.completeLocked(p)
	if done {
		c.merging.Add(1) // under mu, so that Close's Wait comes after it
	}
	if len(jobs) > 0 {
		p.inflight.Add(1) // under mu, before a merge can take p
	}
	c.mu.Unlock()
	if len(jobs) > 0 {
		c.writeSpill(p, jobs)
	}
	if done {
		c.mergeAsync(p)
	}
	return nil
}

// mergeAsync merges off the caller's goroutine: Task and Chunk run on a
// peer link's goroutine, which must not wait for a large trace's save.
// The caller has done c.merging.Add(1), holding c.mu.
func (c *Collector) mergeAsync(p *pending) {
	go func() {
		defer c.merging.Done()
		c.merge(p)
	}()
}

// completeLocked reports whether an announced task has every rank's last
// chunk, and if so takes it off the pending list.
func (c *Collector) completeLocked(p *pending) bool {
	if !p.announced || c.tasks[p.task] != p {
		return false
	}
	for r := range p.ranks {
		if d := p.got[r]; d == nil || !d.final {
			return false
		}
	}
	c.dropLocked(p)
	return true
}

// dropLocked takes p off the pending list.
func (c *Collector) dropLocked(p *pending) {
	delete(c.tasks, p.task)
	c.held -= p.spans
	p.timer.Stop()
}

// expire merges a task whose time is up, with whatever it has.
func (c *Collector) expire(p *pending) {
	c.mu.Lock()
	if c.tasks[p.task] != p {
		c.mu.Unlock()
		return // merged meanwhile
	}
	c.dropLocked(p)
	c.mu.Unlock()
	c.merge(p)
}

// merge builds, saves and reports one task's trace. p is no longer in
// c.tasks, so nothing else touches it but spill writes still under way,
// which it waits for.
func (c *Collector) merge(p *pending) {
	p.inflight.Wait()
	p.io.Lock()
	info := c.mergeInfo(p)
	shift := c.shifts(p.task, info.Ranks)
	var m *Merged
	if p.spill == nil {
		m = mergeInMemory(p, info, shift)
	} else {
		m = mergeStreamed(p, info, shift)
	}
	if len(info.Missing) > 0 {
		c.log.Warn("trace merged without some ranks", "task", p.task, "missingRanks", info.Missing, "announced", p.announced)
	}
	if info.Dropped > 0 {
		c.log.Warn("trace spans dropped at the buffer limits", "task", p.task, "dropped", info.Dropped)
	}
	if p.spill != nil {
		c.log.Info("trace merged from its spill file", "task", p.task, "spans", m.Count, "spilled", p.spilled, "spillBytes", p.spill.size, "runs", len(p.spill.runs))
	}
	res := Result{Task: p.task, Spans: m.Count, Missing: info.Missing}
	if err := c.cfg.Save(m, info); err != nil {
		res.Err = fmt.Errorf("save trace %s: %w", p.task, err)
		c.log.Error("save merged trace", "task", p.task, "err", err)
	}
	if p.spill != nil {
		p.spill.close()
	}
	p.io.Unlock()
	c.mu.Lock()
	c.merged[p.task] = res
	c.order = append(c.order, p.task)
	if len(c.order) > recentlyMerged {
		delete(c.merged, c.order[0])
		c.order = c.order[1:]
	}
	ws := c.waiters[p.task]
	delete(c.waiters, p.task)
	c.mu.Unlock()
	for _, w := range ws {
		w <- res
	}
}

// Wait returns the result of task's merge, waiting for it until ctx ends.
func (c *Collector) Wait(ctx context.Context, task string) (Result, error) {
	c.mu.Lock()
	if res, ok := c.merged[task]; ok {
		c.mu.Unlock()
		return res, nil
	}
	w := make(chan Result, 1)
	c.waiters[task] = append(c.waiters[task], w)
	c.mu.Unlock()
	select {
	case res := <-w:
		return res, nil
	case <-ctx.Done():
		c.mu.Lock()
		c.waiters[task] = slices.DeleteFunc(c.waiters[task], func(x chan Result) bool { return x == w })
		if len(c.waiters[task]) == 0 {
			delete(c.waiters, task)
		}
		c.mu.Unlock()
		return Result{}, fmt.Errorf("trace %s not merged yet: %w", task, ctx.Err())
	}
}

// Close merges every task still pending with what it has and waits for
// merges under way, so that an agent shutting down loses no spans it
// received; later data is refused.
func (c *Collector) Close() {
	c.mu.Lock()
	c.closed = true
	ps := slices.Collect(maps.Values(c.tasks))
	for _, p := range ps {
		c.dropLocked(p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		c.merge(p)
	}
	c.merging.Wait()
}
