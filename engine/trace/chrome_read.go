package trace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

var (
	// ErrMalformed is wrapped by every error about input that is not JSON
	// or not shaped like a Chrome trace.
	ErrMalformed = errors.New("trace: malformed Chrome trace")
	// ErrLimit is wrapped by errors about input past ReadLimits.
	ErrLimit = errors.New("trace: Chrome trace over limits")
)

// Defaults for ReadLimits.
const (
	DefaultMaxEvents = 10_000_000
	DefaultMaxDepth  = 64
	DefaultMaxString = 1 << 20
)

// ReadLimits bound what ReadChrome accepts. Zero fields take the defaults.
// The total size is the caller's to bound (e.g. with io.LimitReader).
type ReadLimits struct {
	MaxEvents int // events in traceEvents, of any kind
	MaxDepth  int // nesting of objects and arrays
	MaxString int // bytes in one string
}

// maxSeries bounds the values one counter event contributes.
const maxSeries = 1024

// maxSpanHint caps the span capacity ReadChrome reserves from the input size
// (2 M spans); bigger traces grow in further chunks.
const maxSpanHint = 2 << 20

// ReadChrome reads a Chrome trace: Orrery's own files and foreign ones such
// as exo's, in the object form {"traceEvents":[...]} or as a bare array. No
// document tree is built. A small input is streamed; one of 8 MiB or more
// (as its Len or Stat tells) is read in place, a file mapped into memory
// rather than copied, by two goroutines that each take half of the events.
// Spans in the form WriteChrome writes take a fast path.
//
// Input cut short keeps the complete events before the cut, whatever the
// form; only empty input and syntax errors fail.
//
// It is tolerant the way exo's loader is: a missing field reads as its zero
// value; ts, dur, tid and args.rank may be numbers, numeric strings or
// booleans; a span's rank is args.rank, else tid. Beyond exo it keeps
// sub-microsecond times exactly, and:
//
//   - events with ph "X" (or no ph) become spans, with lane, bytes, peer,
//     token, flowOut and flowIn from args;
//   - "M" process_name events name the nodes: args.nodeId is the node id
//     (without one, the node id is the pid in decimal) and args.name its
//     friendly name; other metadata is ignored;
//   - "C" events become one counter sample per numeric arg;
//   - "s" and "f" events become Flows, except those a span's flowOut/flowIn
//     already stands for;
//   - other phases and non-object events are skipped.
//
// Strings come back as valid UTF-8 (invalid bytes become U+FFFD). Flow ids are
// kept below 2^63. A span with both flowOut and flowIn keeps one flow id, the
// last read, for both directions.
func ReadChrome(r io.Reader) (*Trace, error) {
	return ReadChromeLimits(r, ReadLimits{})
}

// ReadChromeLimits is ReadChrome with explicit limits.
func ReadChromeLimits(r io.Reader, lim ReadLimits) (*Trace, error) {
	t, _, err := readChrome(r, lim, readOptions{splitMin: splitMin})
	return t, err
}

// readOptions are the ways ReadChrome reads, for tests to compare.
type readOptions struct {
	// splitMin: two goroutines read an input of at least this many bytes
	// (never when it is negative).
	splitMin int64
	noFast   bool // every event through the general reader
}

// readStats says how a read went, for tests.
type readStats struct {
	joined bool // a second goroutine's events were used
	fast   int  // events read by the fast path
}

// readChrome reads as opt says.
func readChrome(r io.Reader, lim ReadLimits, opt readOptions) (t *Trace, rs readStats, err error) {
	if lim.MaxEvents <= 0 {
		lim.MaxEvents = DefaultMaxEvents
	}
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultMaxDepth
	}
	if lim.MaxString <= 0 {
		lim.MaxString = DefaultMaxString
	}
	l := &loader{
		lim: lim,
		t:   &Trace{Processes: map[string]string{}},
	}
	l.initStrings()
	n := sizeHint(r)
	l.splitMin, l.noFast = opt.splitMin, opt.noFast
	if opt.splitMin >= 0 && n >= opt.splitMin {
		// Large: read in place from memory, so that two goroutines can
		// share it; a file is mapped rather than copied.
		data, unmap, end := inMemory(r, n)
		if unmap != nil {
			defer unmap()
		}
		l.data, l.mapped = data, unmap != nil
		l.d = newDecoderBytes(data, end, lim.MaxDepth, lim.MaxString)
	} else {
		l.d = newDecoder(r, lim.MaxDepth, lim.MaxString)
	}
	if n > 0 {
		// Orrery's X events take 150-200 bytes: with a hint from the input
		// size the spans usually fit one chunk and are never copied.
		est := int(min(n/100, int64(lim.MaxEvents), maxSpanHint))
		l.spans.first = est
	}
	// A file cut short (a writer that died) keeps the events before the cut.
	err = l.guard(l.top)
	l.stopSplit()
	rs = readStats{joined: l.joined, fast: l.fast}
	if err != nil && !errors.Is(err, errEOF) {
		return nil, rs, err
	}
	l.finish()
	return l.t, rs, nil
}

type loader struct {
	d   *decoder
	lim ReadLimits
	t   *Trace

	events int
	// Names, categories, lanes and node ids are interned: names[i] is the
	// string of index i (0 is ""), which spans refer to, so that the spans
	// read hold no pointers for the GC to scan until they are made Spans.
	names  []string
	strs   map[string]uint32 // index of a string in names
	recent recentStrings     // cache in front of strs

	// Results grow in chunks (no repeated copying of a growing slice) and
	// are joined at the end. Node ids are resolved then too: metadata may come
	// after the events it names, so each record keeps its pid until then.
	spans                 chunkList[spanRec]
	parts                 []spanPart // spans of a finished split read, in order
	counters              chunkList[CounterSample]
	flows                 chunkList[Flow]
	counterPids, flowPids chunkList[int64]
	procName, procNode    map[int64]string

	ev event // reused for every event

	data     []byte       // the whole input, when read into memory
	splitMin int64        // the smallest event array split between two loaders
	joined   bool         // a second loader's events were taken
	mapped   bool         // data is a mapped file
	noFast   bool         // the fast path is off (tests)
	fast     int          // events read by the fast path
	split    *split       // the second loader, while it reads
	stop     *atomic.Bool // set when this loader is a second one no longer needed
}

// event is one trace event being read.
// spanRec is a span as read: its strings are indices into the loader's
// names, its node is still its pid.
type spanRec struct {
	name, cat, lane uint32
	rank            int
	start, dur      int64
	pid             int64
	args            Args
}

// spanPart is a run of spans with the names they refer to.
type spanPart struct {
	spans []spanRec
	names []string
}

type event struct {
	name, cat uint32 // into names
	ph        string
	ts, dur   int64 // ns
	pid, tid  int64
	id        uint64
	args      eventArgs
}

type eventArgs struct {
	rank               int64
	hasRank            bool
	lane               uint32 // into names
	nodeID, name       string
	hasNodeID, hasName bool
	a                  Args
	series             []series
}

type series struct {
	key string
	v   float64
}

func (l *loader) top() error {
	c, ok := l.d.peek()
	if !ok {
		if l.d.rerr != nil && l.d.rerr != io.EOF {
			return l.d.rerr
		}
		return fmt.Errorf("%w: empty input", ErrMalformed)
	}
	switch c {
	case '[':
		return l.eventArray()
	case '{':
	default:
		return l.d.syntax("want '{' or '['")
	}
	d := l.d
	return d.members(func() error {
		switch string(d.key) {
		case "traceEvents":
			return d.valueIf('[', l.eventArray)
		case "otherData":
			return d.valueIf('{', l.otherData)
		}
		return d.skip()
	})
}

// eventArray reads the array of events. It may end with a trailing comma; an
// end of input in it is handled by ReadChromeLimits.
func (l *loader) eventArray() error {
	d := l.d
	if err := d.enter('['); err != nil {
		return err
	}
	l.startSplit()
	for first := true; ; first = false {
		c, ok := d.peek()
		if !ok {
			return d.readErr()
		}
		if c == ']' {
			d.i++
			d.depth--
			return nil
		}
		if !first {
			if c != ',' {
				return d.syntax("want ',' or ']'")
			}
			d.i++
			c, ok = d.peek()
			if !ok {
				return d.readErr()
			}
			if c == ']' { // trailing comma
				d.i++
				d.depth--
				return nil
			}
		}
		if l.split != nil {
			if done, err := l.joinSplit(); err != nil || done {
				return err
			}
		}
		if err := l.element(c); err != nil {
			return err
		}
	}
}

// element reads one element of the event array, which starts with c.
func (l *loader) element(c byte) error {
	l.events++
	if l.events > l.lim.MaxEvents {
		return fmt.Errorf("%w: more than %d events", ErrLimit, l.lim.MaxEvents)
	}
	if c != '{' {
		return l.d.skip()
	}
	return l.event()
}

// text reads a value as exo's loader would str() it: strings as themselves,
// numbers as written, null/true/false as Python spells them; objects and
// arrays as "".
func (l *loader) text() (uint32, error) {
	v, err := l.d.readScalar()
	if err != nil {
		return 0, err
	}
	switch v.kind {
	case 's', 'n':
		return l.internIdx(v.text), nil
	case 'b':
		if v.b {
			return l.internIdx([]byte("True")), nil
		}
		return l.internIdx([]byte("False")), nil
	case 'z':
		return l.internIdx([]byte("None")), nil
	}
	return 0, nil
}

func (l *loader) event() error {
	if !l.noFast && l.fastEvent() {
		return nil
	}
	d := l.d
	ev := &l.ev
	series := ev.args.series[:0]
	*ev = event{}
	ev.args.series = series
	if err := d.enter('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		more, err := d.more('}', first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if err := d.readKey(); err != nil {
			return err
		}
		switch string(d.key) {
		case "name":
			ev.name, err = l.text()
		case "cat":
			ev.cat, err = l.text()
		case "ph":
			var ph uint32
			ph, err = l.text()
			ev.ph = l.names[ph]
		case "ts":
			ev.ts, _, err = l.fixed(3)
		case "dur":
			ev.dur, _, err = l.fixed(3)
		case "pid":
			ev.pid, _, err = l.fixed(0)
		case "tid":
			ev.tid, _, err = l.fixed(0)
		case "id":
			ev.id, _, err = l.flowID()
		case "args":
			err = d.valueIf('{', l.args)
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
	l.dispatch()
	return nil
}

// fixed reads a loosely typed number in units of 10^-scale (0 when unusable).
func (l *loader) fixed(scale int) (int64, bool, error) {
	v, err := l.d.readScalar()
	if err != nil {
		return 0, false, err
	}
	n, ok := v.fixedInt(scale)
	return n, ok, nil
}

// flowID reads a flow id: a non-negative integer, a decimal or 0x-hex string,
// or any other string (hashed).
func (l *loader) flowID() (uint64, bool, error) {
	v, err := l.d.readScalar()
	if err != nil {
		return 0, false, err
	}
	if v.kind == 's' {
		s := trimSpace(v.text)
		if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
			if u, err := strconv.ParseUint(string(s[2:]), 16, 64); err == nil {
				return u & (1<<63 - 1), true, nil
			}
		}
		if n, ok := v.fixedInt(0); ok {
			return uint64(max(n, 0)), true, nil
		}
		h := uint64(14695981039346656037) // FNV-1a
		for _, c := range v.text {
			h ^= uint64(c)
			h *= 1099511628211
		}
		return h & maxFlowID, true, nil
	}
	n, ok := v.fixedInt(0)
	return uint64(max(n, 0)), ok, nil
}

// dispatch turns the event just read into a span, counter samples, a flow or
// metadata.
func (l *loader) dispatch() {
	ev := &l.ev
	rank := ev.tid
	if ev.args.hasRank {
		rank = ev.args.rank
	}
	switch ev.ph {
	case "", "X":
		// Field by field: a whole-struct store into the heap goes through a
		// bulk write barrier while the GC runs, which it often does here.
		*l.spans.add() = spanRec{name: ev.name, cat: ev.cat, lane: ev.args.lane, rank: clampInt(rank),
			start: ev.ts, dur: ev.dur, pid: ev.pid, args: ev.args.a}
	case "M":
		if l.names[ev.name] != "process_name" {
			return
		}
		if l.procName == nil {
			l.procName, l.procNode = map[int64]string{}, map[int64]string{}
		}
		if ev.args.hasName {
			l.procName[ev.pid] = ev.args.name
		}
		if ev.args.hasNodeID {
			l.procNode[ev.pid] = ev.args.nodeID
		}
	case "C":
		for _, s := range ev.args.series {
			if l.counters.n >= l.lim.MaxEvents {
				break
			}
			unit := s.key
			if unit == "value" {
				unit = ""
			}
			*l.counters.add() = CounterSample{Name: l.names[ev.name], Unit: unit, TsNs: ev.ts, Value: s.v}
			*l.counterPids.add() = ev.pid
		}
	case "s", "f":
		*l.flows.add() = Flow{
			ID:    ev.id,
			Phase: FlowPhase(ev.ph[0]),
			Rank:  clampInt(rank),
			Lane:  l.names[ev.args.lane],
			TsNs:  ev.ts,
			Name:  l.names[ev.name],
			Cat:   l.names[ev.cat],
		}
		*l.flowPids.add() = ev.pid
	}
}

func (l *loader) otherData() error {
	d := l.d
	return d.members(func() error {
		switch string(d.key) {
		case "taskId":
			v, err := d.readScalar()
			if err == nil && v.kind == 's' {
				l.t.TaskID = string(v.text)
			}
			return err
		case "createdAt":
			v, err := d.readScalar()
			if err == nil && v.kind == 's' {
				if at, perr := time.Parse(time.RFC3339Nano, string(v.text)); perr == nil {
					l.t.CreatedAt = at.UTC()
				}
			}
			return err
		case "missingRanks":
			return d.valueIf('[', l.missingRanks)
		}
		return d.skip()
	})
}

func (l *loader) missingRanks() error {
	d := l.d
	return d.elems(func() error {
		v, err := d.readScalar()
		if err != nil {
			return err
		}
		if n, ok := v.fixedInt(0); ok && len(l.t.MissingRanks) < l.lim.MaxEvents {
			l.t.MissingRanks = append(l.t.MissingRanks, clampInt(n))
		}
		return nil
	})
}

// finish resolves pids to node ids and drops flow events that spans already
// stand for.
func (l *loader) finish() {
	t := l.t
	t.Counters = l.counters.join()
	t.Flows = l.flows.join()
	counterPids, flowPids := l.counterPids.join(), l.flowPids.join()
	nodes := map[int64]string{}
	node := func(pid int64) string {
		if n, ok := nodes[pid]; ok {
			return n
		}
		n, ok := l.procNode[pid]
		if !ok {
			n = strconv.FormatInt(pid, 10)
		}
		nodes[pid] = n
		return n
	}
	t.Spans = l.makeSpans(node)
	for i, pid := range counterPids {
		t.Counters[i].Node = node(pid)
	}
	for i, pid := range flowPids {
		t.Flows[i].Node = node(pid)
	}
	pids := make([]int64, 0, len(l.procName))
	for pid := range l.procName {
		pids = append(pids, pid)
	}
	slices.Sort(pids) // deterministic when two pids name one node
	for _, pid := range pids {
		t.Processes[node(pid)] = l.procName[pid]
	}
	if len(t.Flows) > 0 {
		type end struct {
			id uint64
			ph FlowPhase
		}
		covered := map[end]bool{}
		for i := range t.Spans {
			a := &t.Spans[i].Args
			if id := a.FlowOut(); id != 0 {
				covered[end{id, FlowStart}] = true
			}
			if id := a.FlowIn(); id != 0 {
				covered[end{id, FlowFinish}] = true
			}
		}
		kept := t.Flows[:0]
		for _, f := range t.Flows {
			if !covered[end{f.ID, f.Phase}] {
				kept = append(kept, f)
			}
		}
		t.Flows = kept
		if len(kept) == 0 {
			t.Flows = nil
		}
	}
}

// sizeHint is the number of bytes r holds, when it can tell.
func sizeHint(r io.Reader) int64 {
	switch r := r.(type) {
	case interface{ Len() int }: // bytes.Reader, bytes.Buffer, strings.Reader
		return int64(r.Len())
	case interface{ Stat() (fs.FileInfo, error) }: // *os.File
		if fi, err := r.Stat(); err == nil && fi.Mode().IsRegular() {
			return fi.Size()
		}
	}
	return 0
}
