package trace

import (
	"bufio"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// laneTidBase is the first Chrome tid given to a lane track (or to a rank
// that cannot be its own tid). A rank's main lane has tid = rank, as in exo.
const laneTidBase = 1 << 20

// flowName and flowCat name the s/f events drawn from span flow ids.
const (
	flowName = "flow"
	flowCat  = "flow"
)

// WriteChrome streams t as Chrome trace JSON (the JSON Object Format) to w:
// one event per line, never the whole document in memory.
//
//   - otherData carries taskId, createdAt and missingRanks.
//   - M events name each process after its node (args.name: friendly name,
//     args.nodeId: node id) and each thread after its rank ("rank 2") or lane
//     ("rank 2 io"). pids are small integers in node-id order; a rank's main
//     lane has tid = rank.
//   - X events carry ts and dur in µs (sub-µs as up to three decimals) and
//     args {rank, lane?, bytes?, peer?, token?, flowOut?, flowIn?}.
//   - s/f events (id = flow id; f with bp "e") follow every span with a
//     flow (Args.FlowOut/FlowIn): s at the send span's start, f just inside
//     the receive span's end; then t.Flows.
//   - C events hold the counter samples, args {unit: value}.
//
// Events are written in the order of t's slices, so output is deterministic.
func WriteChrome(w io.Writer, t *Trace) error {
	return writeChromeDoc(w, t, newLayout(t), func(e *chromeWriter, l *layout, c *layoutCache) error {
		e.spans(t, l, c)
		return nil
	})
}

// writeChromeDoc writes the document around its spans, which spans writes.
func writeChromeDoc(w io.Writer, t *Trace, l *layout, spans func(*chromeWriter, *layout, *layoutCache) error) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	e := chromeWriter{w: bw}
	e.write(appendOtherData(bw.AvailableBuffer(), t))
	e.metadata(t, l)
	var c layoutCache
	if err := spans(&e, l, &c); err != nil {
		return err
	}
	for i := range t.Flows {
		f := &t.Flows[i]
		pid, tid := l.place(&c, f.Node, f.Rank, f.Lane)
		b := e.begin()
		b = appendFlow(b, f.Phase, f.ID, f.Name, f.Cat, f.TsNs, pid, tid, f)
		e.write(b)
	}
	e.counters(t, l)
	e.write(append(bw.AvailableBuffer(), "\n]}\n"...))
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

// Thread is one Chrome thread of a trace: a lane of a rank on a node.
type Thread struct {
	Node string
	Rank int
	Lane string
}

// WriteChromeSeq is WriteChrome for a trace whose spans are not all in
// memory: t's own Spans are not written; spans yields the spans instead,
// in the order they are to be written, and threads lists every (node,
// rank, lane) among them. It stops at the first error spans yields.
func WriteChromeSeq(w io.Writer, t *Trace, threads []Thread, spans iter.Seq2[*Span, error]) error {
	return writeChromeDoc(w, t, newLayoutOf(t, threads), func(e *chromeWriter, l *layout, c *layoutCache) error {
		for s, err := range spans {
			if err != nil {
				return err
			}
			if _, ok := l.threads[threadKey{s.Node, s.Rank, s.Lane}]; !ok {
				return fmt.Errorf("span %q on node %s, rank %d, lane %q: a thread not listed", s.Name, s.Node, s.Rank, s.Lane)
			}
			e.span(s, l, c)
		}
		return nil
	})
}

// appendOtherData appends the document's start: otherData, and the opening
// of traceEvents.
func appendOtherData(b []byte, t *Trace) []byte {
	b = append(b, `{"otherData":{"generator":"orrery"`...)
	if t.TaskID != "" {
		b = append(b, `,"taskId":`...)
		b = appendString(b, t.TaskID)
	}
	if !t.CreatedAt.IsZero() {
		b = append(b, `,"createdAt":`...)
		b = appendString(b, t.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	if len(t.MissingRanks) > 0 {
		b = append(b, `,"missingRanks":[`...)
		for i, r := range t.MissingRanks {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(r), 10)
		}
		b = append(b, ']')
	}
	return append(b, "},\n\"traceEvents\":[\n"...)
}

// metadata writes the M events naming each process after its node and each
// thread after its rank and lane.
func (e *chromeWriter) metadata(t *Trace, l *layout) {
	for pid, node := range l.nodes {
		name, ok := t.Processes[node]
		if !ok || name == "" {
			name = node
		}
		b := e.begin()
		b = append(b, `{"name":"process_name","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(pid), 10)
		b = append(b, `,"args":{"name":`...)
		b = appendString(b, name)
		b = append(b, `,"nodeId":`...)
		b = appendString(b, node)
		b = append(b, "}}"...)
		e.write(b)
	}
	for _, th := range l.threadList {
		b := e.begin()
		b = append(b, `{"name":"thread_name","ph":"M","pid":`...)
		b = strconv.AppendInt(b, int64(l.pid[th.node]), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, l.threads[th], 10)
		b = append(b, `,"args":{"name":`...)
		name := "rank " + strconv.Itoa(th.rank)
		if th.lane != "" {
			name += " " + th.lane
		}
		b = appendString(b, name)
		b = append(b, "}}"...)
		e.write(b)
	}
}

// spans writes an X event per span, each followed by the s/f events of its
// flows.
func (e *chromeWriter) spans(t *Trace, l *layout, c *layoutCache) {
	for i := range t.Spans {
		e.span(&t.Spans[i], l, c)
	}
}

// span writes one span's X event and the s/f events of its flows.
func (e *chromeWriter) span(s *Span, l *layout, c *layoutCache) {
	pid, tid := l.place(c, s.Node, s.Rank, s.Lane)
	b := e.begin()
	b = append(b, `{"name":`...)
	b = appendString(b, s.Name)
	b = append(b, `,"cat":`...)
	b = appendString(b, s.Cat)
	b = append(b, `,"ph":"X","ts":`...)
	b = appendMicros(b, s.StartNs)
	b = append(b, `,"dur":`...)
	b = appendMicros(b, s.DurNs)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, tid, 10)
	b = append(b, `,"args":{"rank":`...)
	b = strconv.AppendInt(b, int64(s.Rank), 10)
	b = appendArgs(b, s.Lane, &s.Args)
	b = append(b, "}}"...)
	if s.Args.Has&(ArgFlowOut|ArgFlowIn) != 0 && s.Args.Flow != 0 {
		b = appendSpanFlows(b, s, pid, tid)
	}
	e.write(b)
}

// appendSpanFlows appends the s/f events of a span's flows. A flow leaves at
// the start of the send and arrives at the end of the receive (1 ns inside
// it, so the slice encloses it): the data cannot have arrived before it was
// sent, so the arrow never points backwards, however long the receive waited
// or the send waited for its ack.
func appendSpanFlows(b []byte, s *Span, pid, tid int64) []byte {
	if id := s.Args.FlowOut(); id != 0 {
		b = append(b, ",\n"...)
		b = appendFlow(b, FlowStart, id, flowName, flowCat, s.StartNs, pid, tid, nil)
	}
	if id := s.Args.FlowIn(); id != 0 {
		end := s.StartNs
		if s.DurNs > 1 {
			end = s.EndNs() - 1
		}
		b = append(b, ",\n"...)
		b = appendFlow(b, FlowFinish, id, flowName, flowCat, end, pid, tid, nil)
	}
	return b
}

// counters writes a C event per counter sample.
func (e *chromeWriter) counters(t *Trace, l *layout) {
	for i := range t.Counters {
		s := &t.Counters[i]
		b := e.begin()
		b = append(b, `{"name":`...)
		b = appendString(b, s.Name)
		b = append(b, `,"ph":"C","ts":`...)
		b = appendMicros(b, s.TsNs)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(l.pid[s.Node]), 10)
		b = append(b, `,"args":{`...)
		unit := s.Unit
		if unit == "" {
			unit = "value"
		}
		b = appendString(b, unit)
		b = append(b, ':')
		b = appendFloat(b, s.Value)
		b = append(b, "}}"...)
		e.write(b)
	}
}

// chromeWriter puts one event after another with the separators between them
// and keeps the first write error.
type chromeWriter struct {
	w     *bufio.Writer
	err   error
	count int
}

// begin returns a buffer holding the separator before the next event. The
// buffer is the bufio.Writer's own free space, flushed first when it runs
// low, so that building an event rarely allocates.
func (e *chromeWriter) begin() []byte {
	if e.w.Available() < 2048 && e.err == nil {
		e.err = e.w.Flush()
	}
	b := e.w.AvailableBuffer()
	if e.count > 0 {
		b = append(b, ",\n"...)
	}
	e.count++
	return b
}

func (e *chromeWriter) write(b []byte) {
	if e.err != nil {
		return
	}
	_, e.err = e.w.Write(b)
}

// appendFlow appends one s or f event. f, when not nil, is a
// foreign flow whose rank and lane go into args.
func appendFlow(b []byte, ph FlowPhase, id uint64, name, cat string, ts, pid, tid int64, f *Flow) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, name)
	b = append(b, `,"cat":`...)
	b = appendString(b, cat)
	if ph == FlowFinish {
		b = append(b, `,"ph":"f","bp":"e","id":`...)
	} else {
		b = append(b, `,"ph":"s","id":`...)
	}
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, ts)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, pid, 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, tid, 10)
	if f != nil {
		b = append(b, `,"args":{"rank":`...)
		b = strconv.AppendInt(b, int64(f.Rank), 10)
		if f.Lane != "" {
			b = append(b, `,"lane":`...)
			b = appendString(b, f.Lane)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendArgs(b []byte, lane string, a *Args) []byte {
	if lane != "" {
		b = append(b, `,"lane":`...)
		b = appendString(b, lane)
	}
	if a.Has&ArgBytes != 0 {
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, a.Bytes, 10)
	}
	if a.Has&ArgPeer != 0 {
		b = append(b, `,"peer":`...)
		b = strconv.AppendInt(b, int64(a.Peer), 10)
	}
	if a.Has&ArgToken != 0 {
		b = append(b, `,"token":`...)
		b = strconv.AppendInt(b, int64(a.Token), 10)
	}
	if id := a.FlowOut(); id != 0 {
		b = append(b, `,"flowOut":`...)
		b = strconv.AppendUint(b, id, 10)
	}
	if id := a.FlowIn(); id != 0 {
		b = append(b, `,"flowIn":`...)
		b = strconv.AppendUint(b, id, 10)
	}
	return b
}

// threadKey is one Chrome thread: a lane of a rank on a node.
type threadKey struct {
	node string
	rank int
	lane string
}

// layout assigns pids to nodes and tids to (rank, lane) within each node.
type layout struct {
	nodes      []string // index = pid
	pid        map[string]int
	threads    map[threadKey]int64 // tid
	threadList []threadKey         // sorted by pid, then tid
}

// layoutCache remembers the last placement, since consecutive spans mostly
// share their track.
type layoutCache struct {
	ok       bool
	k        threadKey
	pid, tid int64
}

func newLayout(t *Trace) *layout { return newLayoutOf(t, nil) }

// newLayoutOf is newLayout with these threads too (spans not in t).
func newLayoutOf(t *Trace, threads []Thread) *layout {
	l := &layout{pid: map[string]int{}, threads: map[threadKey]int64{}}
	addNode := func(n string) {
		if _, ok := l.pid[n]; !ok {
			l.pid[n] = 0
			l.nodes = append(l.nodes, n)
		}
	}
	for n := range t.Processes {
		addNode(n)
	}
	var last threadKey
	have := false
	addThread := func(k threadKey) {
		if have && k == last {
			return
		}
		last, have = k, true
		if _, ok := l.threads[k]; !ok {
			l.threads[k] = 0
			addNode(k.node)
		}
	}
	for i := range t.Spans {
		s := &t.Spans[i]
		addThread(threadKey{s.Node, s.Rank, s.Lane})
	}
	for i := range t.Flows {
		f := &t.Flows[i]
		addThread(threadKey{f.Node, f.Rank, f.Lane})
	}
	for _, th := range threads {
		addThread(threadKey{th.Node, th.Rank, th.Lane})
	}
	for i := range t.Counters {
		addNode(t.Counters[i].Node)
	}
	slices.Sort(l.nodes)
	for i, n := range l.nodes {
		l.pid[n] = i
	}
	l.threadList = make([]threadKey, 0, len(l.threads))
	for k := range l.threads {
		l.threadList = append(l.threadList, k)
	}
	slices.SortFunc(l.threadList, func(a, b threadKey) int {
		if c := l.pid[a.node] - l.pid[b.node]; c != 0 {
			return c
		}
		if a.rank != b.rank {
			if a.rank < b.rank {
				return -1
			}
			return 1
		}
		switch {
		case a.lane < b.lane:
			return -1
		case a.lane > b.lane:
			return 1
		}
		return 0
	})
	next := make([]int64, len(l.nodes)) // next lane tid per pid
	for _, k := range l.threadList {
		if k.lane == "" && k.rank >= 0 && k.rank < laneTidBase {
			l.threads[k] = int64(k.rank)
			continue
		}
		p := l.pid[k.node]
		l.threads[k] = laneTidBase + next[p]
		next[p]++
	}
	return l
}

func (l *layout) place(c *layoutCache, node string, rank int, lane string) (pid, tid int64) {
	k := threadKey{node, rank, lane}
	if c.ok && c.k == k {
		return c.pid, c.tid
	}
	pid, tid = int64(l.pid[node]), l.threads[k]
	*c = layoutCache{true, k, pid, tid}
	return pid, tid
}

// appendMicros appends ns as microseconds: an integer, or up to three
// decimals when ns is not a whole microsecond. It is exact both ways.
func appendMicros(b []byte, ns int64) []byte {
	u := uint64(ns)
	if ns < 0 {
		b = append(b, '-')
		u = -u
	}
	b = strconv.AppendUint(b, u/1000, 10)
	if f := u % 1000; f != 0 {
		d := [4]byte{'.', byte('0' + f/100), byte('0' + f/10%10), byte('0' + f%10)}
		n := 4
		for d[n-1] == '0' {
			n--
		}
		b = append(b, d[:n]...)
	}
	return b
}

// appendFloat appends v as a JSON number the way encoding/json does; NaN and
// infinities, which JSON cannot hold, become 0.
func appendFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, '0')
	}
	abs := math.Abs(v)
	f := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		f = 'e'
	}
	return strconv.AppendFloat(b, v, f, -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
