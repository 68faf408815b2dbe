package trace

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxBuffered is the number of finished spans a Recorder holds between
// drains when Options.MaxBuffered is 0 (about 130 MiB of spans).
const DefaultMaxBuffered = 1 << 20

// chunkSpans is the number of spans in one storage chunk (~70 KiB).
const chunkSpans = 512

// maxFreeChunks bounds the drained chunks a Recorder keeps for reuse.
const maxFreeChunks = 8

// maxInterned bounds the cached "parent/child" categories per Recorder. Past
// it a child category is still joined correctly, just not cached (one
// allocation per child span), so unbounded category names cannot grow memory.
const maxInterned = 4096

// Options configure a Recorder. The zero value records: tracing is on by
// default.
type Options struct {
	// Disabled turns the recorder off: every method is a cheap no-op.
	Disabled bool
	// Lane is the lane of every span recorded; "" is the rank's main lane.
	// Use one recorder per lane for concurrent sub-tracks (e.g. an I/O
	// goroutine next to the compute loop).
	Lane string
	// NodeName is the node's friendly name, put into the Trace that
	// DrainTrace returns. It may be empty.
	NodeName string
	// MaxBuffered bounds the finished spans held between drains. Past it, new
	// spans are dropped and counted (see Dropped). 0 means
	// DefaultMaxBuffered; a negative value means no bound.
	MaxBuffered int
}

// Recorder records the spans of one task on one rank. It is safe for
// concurrent use. A nil *Recorder is valid and disabled: every method is a
// no-op, so code can trace unconditionally.
type Recorder struct {
	rank     int
	node     string
	nodeName string
	lane     string
	off      bool
	max      int
	mono     int64 // monotonic clock reading that span offsets count from
	baseNs   int64 // the wall time at mono, as Unix nanoseconds

	// Interned categories. Readers load atomically and never lock;
	// internMu serialises the copy-on-write updates.
	cats     atomic.Pointer[catMap] // full category → entry
	catCache [32]atomic.Pointer[catEntry]
	internMu sync.Mutex
	interned int // guarded by internMu

	dropped atomic.Uint64

	mu       sync.Mutex // guards following
	chunks   []*spanChunk
	rd, wr   int // read index into chunks[0], write index into the last chunk
	buffered int
	free     []*spanChunk
	counters []CounterSample
}

type spanChunk struct{ spans [chunkSpans]Span }

// catMap maps a full category to its interned entry; kidMap maps a child
// segment to the child. A published map is never written again (copy on
// write).
type (
	catMap map[string]*catEntry
	kidMap map[string]*kidRef
)

// catEntry is one interned full category and the children seen under it.
type catEntry struct {
	full string
	kids atomic.Pointer[kidMap] // written under Recorder.internMu
	last atomic.Pointer[kidRef] // the child looked up last, tried before kids
}

// kidRef is a child category by its segment under a parent.
type kidRef struct {
	seg string
	e   *catEntry
}

// NewRecorder returns a recorder for the spans of rank on node (the node's
// id). It records unless opts.Disabled.
func NewRecorder(rank int, node string, opts Options) *Recorder {
	now, mono := time.Now(), nanotime()
	r := &Recorder{
		rank:     rank,
		node:     node,
		nodeName: opts.NodeName,
		lane:     opts.Lane,
		off:      opts.Disabled,
		max:      opts.MaxBuffered,
		mono:     mono,
		baseNs:   now.UnixNano(),
	}
	if r.max == 0 {
		r.max = DefaultMaxBuffered
	}
	return r
}

// Enabled reports whether r records spans.
func (r *Recorder) Enabled() bool { return r != nil && !r.off }

// Rank is the rank whose spans r records (0 for a nil recorder).
func (r *Recorder) Rank() int {
	if r == nil {
		return 0
	}
	return r.rank
}

// Node is the node id r stamps on its spans ("" for a nil recorder).
func (r *Recorder) Node() string {
	if r == nil {
		return ""
	}
	return r.node
}

// Dropped is the number of spans lost because MaxBuffered was reached.
func (r *Recorder) Dropped() uint64 {
	if r == nil {
		return 0
	}
	return r.dropped.Load()
}

// now is the time since r.mono in nanoseconds (monotonic clock).
func (r *Recorder) now() int64 { return nanotime() - r.mono }

// Token is an open span. End it exactly once; a zero Token (from a nil or
// disabled recorder) ignores End and Child. Its methods take a pointer so
// that the hot path copies nothing: keep the Token in a variable
// (tok := r.Start(…); defer tok.End(args)).
type Token struct {
	// Six words: 48 bytes copy in three 16-byte moves, none overlapping
	// (a 56-byte Token cost the disabled path a store-forwarding stall).
	r     *Recorder
	name  string
	cat   string
	start int64 // ns since r.mono
}

// Start opens a top-level span with the given name and category. It does not
// allocate.
func (r *Recorder) Start(name, category string) Token {
	if r == nil || r.off { // inlined: a disabled recorder costs this test
		return Token{}
	}
	return r.start(name, category)
}

// start is kept out of line so that Start, which is just the enabled test and
// this call, inlines.
//
//go:noinline
func (r *Recorder) start(name, category string) Token {
	return Token{r: r, name: name, cat: category, start: r.now()}
}

// Child opens a span nested in t: its category is t's category, a '/', and
// category ("decode" + "compute" → "decode/compute"). The joined category is
// built once per recorder and pair, then reused without allocating.
func (t *Token) Child(name, category string) Token {
	if t.r == nil {
		return Token{}
	}
	return t.child(name, category)
}

// child is out of line for the same reason as start.
//
//go:noinline
func (t *Token) child(name, category string) Token {
	r := t.r
	e := r.kidEntry(r.entry(t.cat), category) // t is only read: goroutines may share a parent
	return Token{r: r, name: name, cat: e.full, start: r.now()}
}

// StartAt is Start for a span that began at t (e.g. when the first byte
// of a message arrived, before the code that records it ran).
func (r *Recorder) StartAt(name, category string, at time.Time) Token {
	t := r.Start(name, category)
	if t.r != nil {
		t.start -= max(time.Since(at).Nanoseconds(), 0)
	}
	return t
}

// ChildAt is Child for a span that began at t.
func (t *Token) ChildAt(name, category string, at time.Time) Token {
	c := t.Child(name, category)
	if c.r != nil {
		c.start -= max(time.Since(at).Nanoseconds(), 0)
	}
	return c
}

// Category is the span's full category ("" for a zero Token).
func (t *Token) Category() string { return t.cat }

// End closes the span and records it with args. It does not allocate in steady
// state (see Recorder.AppendDrain).
//
// End clears t, so a second End (say, an explicit one before a deferred one)
// records nothing.
func (t *Token) End(args Args) {
	if r := t.r; r != nil {
		r.end(t, &args)
		t.r = nil
	}
}

// EndAt is End for a span that ended at t, before the code that records
// it ran (an all-reduce inside a forward pass, recorded after it).
func (t *Token) EndAt(args Args, at time.Time) {
	if r := t.r; r != nil {
		r.endAt(t, &args, r.now()-max(time.Since(at).Nanoseconds(), 0))
		t.r = nil
	}
}

func (r *Recorder) end(t *Token, args *Args) { r.endAt(t, args, r.now()) }

func (r *Recorder) endAt(t *Token, args *Args, end int64) {
	r.mu.Lock()
	if r.max > 0 && r.buffered >= r.max {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	var s *Span
	if n := len(r.chunks); n > 0 && r.wr < chunkSpans { // the common case, inline
		s = &r.chunks[n-1].spans[r.wr]
		r.wr++
		r.buffered++
	} else {
		s = r.slotLocked()
	}
	// Field by field: a whole-struct store would go through a bulk write
	// barrier.
	s.Name = t.name
	s.Cat = t.cat
	s.Node = r.node
	s.Lane = r.lane
	s.Rank = r.rank
	s.StartNs = r.baseNs + t.start
	// Never negative: ChildAt and EndAt place a span by two clock reads
	// each, and a preemption between them (seen under CI load on a 16 µs
	// all-reduce) could put its end before its start.
	s.DurNs = max(end-t.start, 0)
	s.Args = *args
	r.mu.Unlock()
}

// slotLocked returns the next free span slot, opening a chunk if needed.
func (r *Recorder) slotLocked() *Span {
	if len(r.chunks) == 0 || r.wr == chunkSpans {
		var c *spanChunk
		if n := len(r.free); n > 0 {
			c = r.free[n-1]
			r.free = r.free[:n-1]
		} else {
			c = new(spanChunk)
		}
		r.chunks = append(r.chunks, c)
		r.wr = 0
	}
	s := &r.chunks[len(r.chunks)-1].spans[r.wr]
	r.wr++
	r.buffered++
	return s
}

// Buffered is the number of finished spans waiting to be drained.
func (r *Recorder) Buffered() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buffered
}

// Drain removes and returns up to max finished spans, oldest first (all of
// them when max <= 0). The returned slice is the caller's.
func (r *Recorder) Drain(max int) []Span {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.buffered
	if max > 0 && max < n {
		n = max
	}
	if n == 0 {
		return nil
	}
	return r.drainLocked(make([]Span, 0, n), n)
}

// AppendDrain is Drain appending to dst: with a dst of enough capacity it
// allocates nothing, which is how a long task ships spans in bounded chunks.
func (r *Recorder) AppendDrain(dst []Span, max int) []Span {
	if r == nil {
		return dst
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.buffered
	if max > 0 && max < n {
		n = max
	}
	return r.drainLocked(dst, n)
}

func (r *Recorder) drainLocked(dst []Span, n int) []Span {
	for n > 0 {
		c := r.chunks[0]
		end := r.wr
		if len(r.chunks) > 1 {
			end = chunkSpans
		}
		take := min(end-r.rd, n)
		dst = append(dst, c.spans[r.rd:r.rd+take]...)
		r.rd += take
		r.buffered -= take
		n -= take
		if r.rd < end {
			break
		}
		if len(r.chunks) == 1 {
			// The write chunk is empty again: reuse it in place.
			clear(c.spans[:r.wr])
			r.rd, r.wr = 0, 0
			break
		}
		clear(c.spans[:]) // drop string references for the GC
		copy(r.chunks, r.chunks[1:])
		r.chunks[len(r.chunks)-1] = nil
		r.chunks = r.chunks[:len(r.chunks)-1]
		r.rd = 0
		if len(r.free) < maxFreeChunks {
			r.free = append(r.free, c)
		}
	}
	return dst
}

// Counter records a sample of the counter track name (unit is the series
// label, e.g. "bytes" or "MB/s") at the current time on r's node.
func (r *Recorder) Counter(name, unit string, value float64) {
	if r == nil || r.off {
		return
	}
	ts := r.baseNs + r.now()
	r.mu.Lock()
	r.counters = append(r.counters, CounterSample{Node: r.node, Name: name, Unit: unit, TsNs: ts, Value: value})
	r.mu.Unlock()
}

// DrainCounters removes and returns the counter samples recorded so far.
func (r *Recorder) DrainCounters() []CounterSample {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counters
	r.counters = nil
	return c
}

// DrainTrace drains every span and counter sample into a new Trace for taskID
// (a single-rank trace, e.g. for tests or a local export).
func (r *Recorder) DrainTrace(taskID string) *Trace {
	t := &Trace{TaskID: taskID, CreatedAt: time.Now().UTC(), Processes: map[string]string{}}
	if r == nil {
		return t
	}
	if r.nodeName != "" {
		t.Processes[r.node] = r.nodeName
	}
	t.Spans = r.Drain(0)
	t.Counters = r.DrainCounters()
	return t
}

// entry returns the interned entry of a full category. A small
// direct-mapped cache answers repeated lookups without hashing: a Token's
// category comes from an entry or a literal, so the comparison usually finds
// equal pointers.
func (r *Recorder) entry(full string) *catEntry {
	slot := &r.catCache[catSlot(full)]
	if e := slot.Load(); e != nil && e.full == full {
		return e
	}
	if m := r.cats.Load(); m != nil {
		if e := (*m)[full]; e != nil {
			slot.Store(e)
			return e
		}
	}
	r.internMu.Lock()
	defer r.internMu.Unlock()
	return r.entryLocked(full)
}

func (r *Recorder) entryLocked(full string) *catEntry {
	old := r.cats.Load()
	if old != nil {
		if e := (*old)[full]; e != nil {
			return e
		}
	}
	e := &catEntry{full: full}
	if r.interned >= maxInterned {
		return e
	}
	m := make(catMap, 1+len(derefOrNil(old)))
	maps.Copy(m, derefOrNil(old))
	m[full] = e
	r.cats.Store(&m)
	r.interned++
	return e
}

// kidEntry returns the interned entry of category seg nested in parent.
func (r *Recorder) kidEntry(parent *catEntry, seg string) *catEntry {
	if k := parent.last.Load(); k != nil && k.seg == seg {
		return k.e
	}
	if m := parent.kids.Load(); m != nil {
		if k := (*m)[seg]; k != nil {
			parent.last.Store(k)
			return k.e
		}
	}
	r.internMu.Lock()
	defer r.internMu.Unlock()
	old := parent.kids.Load()
	if old != nil {
		if k := (*old)[seg]; k != nil {
			return k.e
		}
	}
	e := r.entryLocked(joinCat(parent.full, seg))
	if r.interned >= maxInterned {
		return e
	}
	m := make(kidMap, 1+len(derefOrNil(old)))
	maps.Copy(m, derefOrNil(old))
	m[seg] = &kidRef{seg: seg, e: e}
	parent.kids.Store(&m)
	r.interned++
	return e
}

func derefOrNil[M ~map[string]V, V any](p *M) M {
	if p == nil {
		return nil
	}
	return *p
}

// joinCat nests child under parent the way exo does: "parent/child", or just
// child at the top level.
func joinCat(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "/" + child
}
