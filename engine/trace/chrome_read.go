package trace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
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
// (256 MiB of spans); bigger traces grow in further chunks.
const maxSpanHint = 2 << 20

// maxInternedStrings bounds the distinct names ReadChrome shares between
// events; past it each new name is its own allocation.
const maxInternedStrings = 1 << 16

// ReadChrome reads a Chrome trace: Orrery's own files and foreign ones such
// as exo's, in the object form {"traceEvents":[...]} or as a bare array. It
// streams: no document tree is built.
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
		d:    newDecoder(r, lim.MaxDepth, lim.MaxString),
		lim:  lim,
		t:    &Trace{Processes: map[string]string{}},
		strs: map[string]string{},
	}
	if n := sizeHint(r); n > 0 {
		// Orrery's X events take 150-200 bytes: with a hint from the input
		// size the spans usually fit one chunk and are never copied.
		est := int(min(n/160, int64(lim.MaxEvents), maxSpanHint))
		l.spans.first, l.spanPids.first = est, est
	}
	// A file cut short (a writer that died) keeps the events before the cut.
	if err := l.top(); err != nil && !errors.Is(err, errEOF) {
		return nil, err
	}
	l.finish()
	return l.t, nil
}

type loader struct {
	d   *decoder
	lim ReadLimits
	t   *Trace

	events int
	strs   map[string]string // interned names, categories, lanes, node ids
	recent recentStrings     // cache in front of strs

	// Results grow in chunks (no repeated copying of a growing slice) and
	// are joined at the end. Node ids are resolved then too: metadata may come
	// after the events it names, so each record keeps its pid until then.
	spans                           chunkList[Span]
	counters                        chunkList[CounterSample]
	flows                           chunkList[Flow]
	spanPids, counterPids, flowPids chunkList[int64]
	procName, procNode              map[int64]string

	ev event // reused for every event
}

// event is one trace event being read.
type event struct {
	name, cat string
	ph        string
	ts, dur   int64 // ns
	pid, tid  int64
	id        uint64
	args      eventArgs
}

type eventArgs struct {
	rank               int64
	hasRank            bool
	lane, nodeID, name string
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
		l.events++
		if l.events > l.lim.MaxEvents {
			return fmt.Errorf("%w: more than %d events", ErrLimit, l.lim.MaxEvents)
		}
		if c != '{' {
			if err := d.skip(); err != nil {
				return err
			}
			continue
		}
		if err := l.event(); err != nil {
			return err
		}
	}
}

// intern returns b as a string shared between events. A small
// direct-mapped cache in front of the map catches the names and categories
// that repeat from one event to the next without hashing them.
func (l *loader) intern(b []byte) string {
	slot := &l.recent[recentSlot(b)]
	if *slot == string(b) {
		return *slot
	}
	s, ok := l.strs[string(b)]
	if !ok {
		s = string(b)
		if len(l.strs) < maxInternedStrings {
			l.strs[s] = s
		}
	}
	*slot = s
	return s
}

func recentSlot(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return (len(b)*31 + int(b[0])*7 + int(b[len(b)-1])) & (len(recentStrings{}) - 1)
}

type recentStrings [64]string

// text reads a value as exo's loader would str() it: strings as themselves,
// numbers as written, null/true/false as Python spells them; objects and
// arrays as "".
func (l *loader) text() (string, error) {
	v, err := l.d.readScalar()
	if err != nil {
		return "", err
	}
	switch v.kind {
	case 's', 'n':
		return l.intern(v.text), nil
	case 'b':
		if v.b {
			return "True", nil
		}
		return "False", nil
	case 'z':
		return "None", nil
	}
	return "", nil
}

func (l *loader) event() error {
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
			ev.ph, err = l.text()
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
		sp := l.spans.add()
		sp.Name = ev.name
		sp.Cat = ev.cat
		sp.Lane = ev.args.lane
		sp.Rank = clampInt(rank)
		sp.StartNs = ev.ts
		sp.DurNs = ev.dur
		sp.Args = ev.args.a
		*l.spanPids.add() = ev.pid
	case "M":
		if ev.name != "process_name" {
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
			*l.counters.add() = CounterSample{Name: ev.name, Unit: unit, TsNs: ev.ts, Value: s.v}
			*l.counterPids.add() = ev.pid
		}
	case "s", "f":
		*l.flows.add() = Flow{
			ID:    ev.id,
			Phase: FlowPhase(ev.ph[0]),
			Rank:  clampInt(rank),
			Lane:  ev.args.lane,
			TsNs:  ev.ts,
			Name:  ev.name,
			Cat:   ev.cat,
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
	t.Spans = l.spans.join()
	t.Counters = l.counters.join()
	t.Flows = l.flows.join()
	spanPids, counterPids, flowPids := l.spanPids.join(), l.counterPids.join(), l.flowPids.join()
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
	var lastPid int64
	lastNode := ""
	have := false
	for i, pid := range spanPids {
		if !have || pid != lastPid {
			lastPid, lastNode, have = pid, node(pid), true
		}
		t.Spans[i].Node = lastNode
	}
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
