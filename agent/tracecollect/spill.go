package tracecollect

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// Spilling: a task's spans past the collector's memory budgets go to a
// file of its own in Config.SpillDir, as sorted runs (one rank's spans
// each, by start), in a compact binary form; the merge then streams every
// run and what is still in memory into the Chrome file, in time order,
// without ever holding the whole task (a 60 s task of 3 ranks at 50 k
// spans/s is 9 M spans, about 1 GB in memory).
//
// A run is a sequence of spans, each: name, category and lane (a string
// is an index into the run's table; the index one past its end brings a
// new string, uvarint length first), then the uvarints start − previous
// start, duration, the Args mask, and the Args fields it names (bytes and
// peer and token as varints, the flow as a uvarint).

// spillPrefix names spill files, so that leftovers of a crash are known.
const spillPrefix = "spill-"

// spill is one task's spill file. Not safe for concurrent use: the
// pending task's io mutex guards it.
type spill struct {
	f    *os.File
	runs []run
	size int64
}

// run is one rank's sorted spans at [off, off+n) of the file; first and
// last are its earliest start and latest end (on the node's clock).
type run struct {
	rank        int
	node        string
	off, n      int64
	spans       int
	first, last int64
}

// newSpill creates a spill file in dir.
func newSpill(dir string) (*spill, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, spillPrefix+"*")
	if err != nil {
		return nil, err
	}
	return &spill{f: f}, nil
}

// cleanSpillDir removes spill files an earlier process left (it crashed
// before merging them).
func cleanSpillDir(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), spillPrefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// write appends one rank's spans, sorted here by start, as a run.
func (s *spill) write(rank int, node string, spans []trace.Span) error {
	slices.SortStableFunc(spans, func(a, b trace.Span) int {
		switch {
		case a.StartNs < b.StartNs:
			return -1
		case a.StartNs > b.StartNs:
			return 1
		}
		return 0
	})
	w := bufio.NewWriterSize(io.NewOffsetWriter(s.f, s.size), 256<<10)
	enc := runEncoder{w: w, table: map[string]uint64{}}
	for i := range spans {
		enc.span(&spans[i])
	}
	if enc.err == nil {
		enc.err = w.Flush()
	}
	if enc.err != nil {
		return fmt.Errorf("spill %d spans of rank %d: %w", len(spans), rank, enc.err)
	}
	r := run{rank: rank, node: node, off: s.size, n: enc.n, spans: len(spans)}
	if len(spans) > 0 {
		r.first = spans[0].StartNs
		for i := range spans {
			r.last = max(r.last, spans[i].EndNs())
		}
	}
	s.runs = append(s.runs, r)
	s.size += enc.n
	return nil
}

// close removes the file.
func (s *spill) close() {
	s.f.Close()
	os.Remove(s.f.Name())
}

type runEncoder struct {
	w     *bufio.Writer
	table map[string]uint64
	prev  int64
	n     int64
	err   error
	buf   [binary.MaxVarintLen64]byte
}

func (e *runEncoder) uvarint(v uint64) {
	k := binary.PutUvarint(e.buf[:], v)
	e.bytes(e.buf[:k])
}

func (e *runEncoder) varint(v int64) {
	k := binary.PutVarint(e.buf[:], v)
	e.bytes(e.buf[:k])
}

func (e *runEncoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	var k int
	k, e.err = e.w.Write(b)
	e.n += int64(k)
}

func (e *runEncoder) str(s string) {
	if i, ok := e.table[s]; ok {
		e.uvarint(i)
		return
	}
	i := uint64(len(e.table))
	e.table[s] = i
	e.uvarint(i)
	e.uvarint(uint64(len(s)))
	e.bytes([]byte(s))
}

func (e *runEncoder) span(s *trace.Span) {
	e.str(s.Name)
	e.str(s.Cat)
	e.str(s.Lane)
	e.uvarint(uint64(s.StartNs - e.prev)) // sorted: never negative
	e.prev = s.StartNs
	e.uvarint(uint64(s.DurNs)) // the collector refuses negative ones
	a := &s.Args
	e.bytes([]byte{byte(a.Has)})
	if a.Has&trace.ArgBytes != 0 {
		e.varint(a.Bytes)
	}
	if a.Has&(trace.ArgFlowOut|trace.ArgFlowIn) != 0 {
		e.uvarint(a.Flow)
	}
	if a.Has&trace.ArgPeer != 0 {
		e.varint(int64(a.Peer))
	}
	if a.Has&trace.ArgToken != 0 {
		e.varint(int64(a.Token))
	}
}

// runReader reads one run back, span by span.
type runReader struct {
	r     *bufio.Reader
	run   run
	left  int
	table []string
	prev  int64
	shift time.Duration
	cur   trace.Span
}

func (s *spill) reader(r run, shift time.Duration) *runReader {
	return &runReader{r: bufio.NewReaderSize(io.NewSectionReader(s.f, r.off, r.n), 64<<10), run: r, left: r.spans, shift: shift}
}

// next reads the next span into rr.cur (shifted); false at the run's end.
func (rr *runReader) next() (bool, error) {
	if rr.left == 0 {
		return false, nil
	}
	rr.left--
	s := &rr.cur
	*s = trace.Span{Node: rr.run.node, Rank: rr.run.rank}
	var err error
	str := func() string {
		if err != nil {
			return ""
		}
		var i uint64
		if i, err = binary.ReadUvarint(rr.r); err != nil {
			return ""
		}
		switch {
		case i < uint64(len(rr.table)):
			return rr.table[i]
		case i > uint64(len(rr.table)):
			err = fmt.Errorf("string %d of a table of %d", i, len(rr.table))
			return ""
		}
		var n uint64
		if n, err = binary.ReadUvarint(rr.r); err != nil {
			return ""
		}
		if n > maxSpillString {
			err = fmt.Errorf("a %d-byte string", n)
			return ""
		}
		b := make([]byte, n)
		if _, err = io.ReadFull(rr.r, b); err != nil {
			return ""
		}
		rr.table = append(rr.table, string(b))
		return rr.table[i]
	}
	uv := func() uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = binary.ReadUvarint(rr.r)
		return v
	}
	v := func() int64 {
		if err != nil {
			return 0
		}
		var x int64
		x, err = binary.ReadVarint(rr.r)
		return x
	}
	s.Name, s.Cat, s.Lane = str(), str(), str()
	rr.prev += int64(uv())
	s.StartNs, s.DurNs = rr.prev+int64(rr.shift), int64(uv())
	if err == nil {
		var has byte
		has, err = rr.r.ReadByte()
		s.Args.Has = trace.ArgMask(has)
	}
	a := &s.Args
	if a.Has&trace.ArgBytes != 0 {
		a.Bytes = v()
	}
	if a.Has&(trace.ArgFlowOut|trace.ArgFlowIn) != 0 {
		a.Flow = uv()
	}
	if a.Has&trace.ArgPeer != 0 {
		a.Peer = int32(v())
	}
	if a.Has&trace.ArgToken != 0 {
		a.Token = int32(v())
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return false, fmt.Errorf("spill file, run of rank %d at %d: %w", rr.run.rank, rr.run.off, err)
	}
	return true, nil
}

// maxSpillString bounds a string read back from a spill file (a span
// name is far shorter; a longer one means the file is damaged).
const maxSpillString = 1 << 20

// source is one sorted sequence the merge reads: a spilled run, or the
// spans of a rank still in memory (sorted and shifted).
type source struct {
	rr  *runReader   // a run, or
	mem []trace.Span // spans in memory
	cur *trace.Span
}

func (s *source) advance() (bool, error) {
	if s.rr != nil {
		ok, err := s.rr.next()
		s.cur = &s.rr.cur
		return ok, err
	}
	if len(s.mem) == 0 {
		return false, nil
	}
	s.cur, s.mem = &s.mem[0], s.mem[1:]
	return true, nil
}

// sourceHeap orders sources by their current span's start (ties in no
// particular order).
type sourceHeap []*source

func (h sourceHeap) Len() int { return len(h) }
func (h sourceHeap) Less(i, j int) bool {
	return h[i].cur.StartNs < h[j].cur.StartNs
}
func (h sourceHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)   { *h = append(*h, x.(*source)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeSources yields the spans of every source in start order.
func mergeSources(srcs []*source) iter.Seq2[*trace.Span, error] {
	return func(yield func(*trace.Span, error) bool) {
		h := make(sourceHeap, 0, len(srcs))
		for _, s := range srcs {
			ok, err := s.advance()
			if err != nil {
				yield(nil, err)
				return
			}
			if ok {
				h = append(h, s)
			}
		}
		heap.Init(&h)
		for len(h) > 0 {
			s := h[0]
			if !yield(s.cur, nil) {
				return
			}
			ok, err := s.advance()
			if err != nil {
				yield(nil, err)
				return
			}
			if ok {
				heap.Fix(&h, 0)
			} else {
				heap.Pop(&h)
			}
		}
	}
}

// makeRoomLocked makes room in memory for a chunk's spans of p: past the
// task's or the collector's budget, p's spans in memory go to its spill
// file (the jobs returned, for writeSpill), and the chunk's too when the
// other tasks hold the memory. Without a spill dir, what does not fit is
// dropped and counted.
func (c *Collector) makeRoomLocked(p *pending, rank int, from string, spans *[]trace.Span) []spillJob {
	n := len(*spans)
	if p.spans+n <= c.cfg.TaskSpans && c.held+n <= c.cfg.MaxSpans {
		return nil
	}
	if c.cfg.SpillDir == "" {
		room := max(0, min(c.cfg.MaxSpans-c.held, c.cfg.TaskSpans-p.spans))
		if n > room {
			p.dropped += uint64(n - room)
			*spans = (*spans)[:room]
		}
		return nil
	}
	var jobs []spillJob
	for r, rd := range p.got {
		var all []trace.Span
		for _, sp := range rd.spans {
			all = append(all, sp...)
		}
		if len(all) > 0 {
			jobs = append(jobs, spillJob{rank: r, node: rd.node, spans: all})
		}
		rd.spans = nil
	}
	p.spilled += p.spans
	c.held -= p.spans
	p.spans = 0
	if c.held+n > c.cfg.MaxSpans || n > c.cfg.TaskSpans {
		jobs = append(jobs, spillJob{rank: rank, node: from, spans: *spans})
		p.spilled += n
		*spans = nil
	}
	return jobs
}

// writeSpill writes spill jobs of p to its spill file (creating it), off
// the collector's lock; spans it cannot write are counted as dropped.
func (c *Collector) writeSpill(p *pending, jobs []spillJob) {
	defer p.inflight.Done()
	p.io.Lock()
	defer p.io.Unlock()
	for _, j := range jobs {
		err := p.spillErr
		if err == nil && p.spill == nil {
			if p.spill, err = newSpill(c.cfg.SpillDir); err != nil {
				p.spillErr = err
			}
		}
		if err == nil && p.spill.size > c.cfg.MaxSpillBytes {
			err = fmt.Errorf("its spill file is %d bytes, over the %d limit", p.spill.size, c.cfg.MaxSpillBytes)
		}
		if err == nil {
			err = p.spill.write(j.rank, j.node, j.spans)
		}
		if err != nil {
			if p.spillDropped == 0 {
				c.log.Error("trace spans could not go to disk; dropped", "task", p.task, "rank", j.rank, "spans", len(j.spans), "err", err)
			}
			p.spillDropped += uint64(len(j.spans))
			continue
		}
		if p.threads == nil {
			p.threads = map[trace.Thread]bool{}
		}
		for i := range j.spans {
			p.threads[trace.Thread{Node: j.node, Rank: j.rank, Lane: j.spans[i].Lane}] = true
		}
	}
}
