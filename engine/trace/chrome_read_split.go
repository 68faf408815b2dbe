package trace

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// A large trace is read by two goroutines: as the loader enters the event
// array, a second loader starts at an event halfway through the rest and
// reads to the array's end. When the first reaches that event itself, it
// takes the second's results and jumps past the array; if it never lands
// exactly there (the guess fell inside a string) or the second failed, the
// second's work is dropped and the first reads on alone, so the result and
// its errors are always those of a plain sequential read.

// splitMin is the smallest event array worth splitting.
const splitMin = 8 << 20

// splitSearch bounds how far past the middle a line starting an event is
// looked for ("\n{": Orrery writes an event per line).
const splitSearch = 1 << 20

// split is the second loader's half of an event array.
type split struct {
	at     int64 // where its first event starts
	stop   atomic.Bool
	done   chan struct{}
	l      *loader
	end    int64 // offset just past the array's ']'
	err    error
	events int
}

// startSplit starts the second loader when l reads an in-memory trace and
// the event array (starting at the decoder's position) is large.
func (l *loader) startSplit() {
	data := l.data
	start := l.d.off + int64(l.d.i)
	if data == nil || int64(len(data))-start < max(l.splitMin, 2) {
		return
	}
	mid := start + (int64(len(data))-start)/2
	k := bytes.Index(data[mid:min(mid+splitSearch, int64(len(data)))], []byte("\n{"))
	if k < 0 {
		return
	}
	s := &split{at: mid + int64(k) + 1, done: make(chan struct{})}
	h := &loader{
		d:        newDecoderBytes(data[s.at:], l.d.rerr, l.lim.MaxDepth, l.lim.MaxString),
		splitMin: -1,
		noFast:   l.noFast,
		lim:      l.lim,
		t:        &Trace{},
		stop:     &s.stop,
		mapped:   l.mapped,
	}
	h.initStrings()
	h.d.depth = l.d.depth
	est := int(min((int64(len(data))-s.at)/100, maxSpanHint))
	h.spans.first, l.spans.first = est, est
	s.l = h
	l.split = s
	go func() {
		defer close(s.done)
		s.err = h.guard(h.eventsFrom)
		s.end = s.at + int64(h.d.i)
		s.events = h.events
	}()
}

// eventsFrom reads events from the first one to the array's closing ']'.
func (l *loader) eventsFrom() error {
	d := l.d
	for first := true; ; first = false {
		if l.stop.Load() {
			return errSplitStopped
		}
		c, ok := d.peek()
		if !ok {
			return d.readErr()
		}
		if !first {
			if c == ']' {
				d.i++
				d.depth--
				return nil
			}
			if c != ',' {
				return d.syntax("want ',' or ']'")
			}
			d.i++
			if c, ok = d.peek(); !ok {
				return d.readErr()
			} else if c == ']' {
				d.i++
				d.depth--
				return nil
			}
		}
		if err := l.element(c); err != nil {
			return err
		}
	}
}

var errSplitStopped = fmt.Errorf("trace: split read stopped")

// joinSplit is called before each event of the array: at the second
// loader's first event it takes its results (true: the array has been
// read); past it, it stops the second loader.
func (l *loader) joinSplit() (bool, error) {
	s := l.split
	pos := l.d.off + int64(l.d.i)
	if pos < s.at {
		return false, nil
	}
	l.split = nil
	if pos > s.at {
		s.stop.Store(true)
		<-s.done
		return false, nil
	}
	<-s.done
	if s.err != nil {
		return false, nil // read on alone: the same error comes at its place
	}
	h := s.l
	if l.events+h.events > l.lim.MaxEvents {
		return false, nil // the sequential read fails at the right event
	}
	l.events += h.events
	l.fast += h.fast
	// The spans so far, then the second loader's, each with its names.
	l.parts = append(l.parts, spanPart{l.spans.join(), l.names}, spanPart{h.spans.join(), h.names})
	l.counters.appendList(&h.counters)
	l.counterPids.appendList(&h.counterPids)
	l.flows.appendList(&h.flows)
	l.flowPids.appendList(&h.flowPids)
	for pid, n := range h.procName {
		if l.procName == nil {
			l.procName, l.procNode = map[int64]string{}, map[int64]string{}
		}
		l.procName[pid] = n
	}
	for pid, n := range h.procNode {
		if l.procNode == nil {
			l.procName, l.procNode = map[int64]string{}, map[int64]string{}
		}
		l.procNode[pid] = n
	}
	d := l.d
	d.i = int(s.end)
	d.depth = h.d.depth
	l.joined = true
	return true, nil
}

// stopSplit stops a second loader still reading (the read ended before
// reaching its first event) and waits for it.
func (l *loader) stopSplit() {
	if s := l.split; s != nil {
		l.split = nil
		s.stop.Store(true)
		<-s.done
	}
}

// inMemory returns r's content, about n bytes: a regular file mapped where
// the system can (unmap releases it), else read into memory; end is io.EOF,
// or the error that cut the read short.
func inMemory(r io.Reader, n int64) (data []byte, unmap func(), end error) {
	if f, ok := r.(*os.File); ok {
		if data, unmap, ok := mapFile(f, n); ok {
			return data, unmap, io.EOF
		}
	}
	// unmap nil: not mapped.
	buf := make([]byte, 0, n+1) // +1: the EOF read needs room
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			return buf, nil, err
		}
	}
}

// guard runs read; on a mapped file, a fault reading it (the file was cut
// short under the mapping) becomes an error rather than a crash.
func (l *loader) guard(read func() error) (err error) {
	if !l.mapped {
		return read()
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			err = fmt.Errorf("%w: the file changed while it was read: %v", ErrMalformed, r)
		}
	}()
	return read()
}

// makeSpans turns the spans read into Spans, node ids resolved: the parts
// of a split read, then the spans read since. Large traces are converted
// by two goroutines.
func (l *loader) makeSpans(node func(pid int64) string) []Span {
	parts := append(l.parts, spanPart{l.spans.join(), l.names})
	n := 0
	for _, p := range parts {
		n += len(p.spans)
	}
	if n == 0 {
		return nil
	}
	out := make([]Span, n)
	hugePages(out)
	// Node ids first, on this goroutine (node fills a map).
	pids := map[int64]string{}
	for _, p := range parts {
		for i := range p.spans {
			pid := p.spans[i].pid
			if _, ok := pids[pid]; !ok {
				pids[pid] = node(pid)
			}
		}
	}
	fill := func(out []Span, recs []spanRec, names []string) {
		var lastPid int64
		lastNode, have := "", false
		for i := range recs {
			r := &recs[i]
			if !have || r.pid != lastPid {
				lastPid, lastNode, have = r.pid, pids[r.pid], true
			}
			sp := &out[i]
			sp.Name = names[r.name]
			sp.Cat = names[r.cat]
			sp.Lane = names[r.lane]
			sp.Node = lastNode
			sp.Rank = r.rank
			sp.StartNs = r.start
			sp.DurNs = r.dur
			sp.Args = r.args
		}
	}
	var wg sync.WaitGroup
	at := 0
	for _, p := range parts {
		dst := out[at : at+len(p.spans)]
		at += len(p.spans)
		if len(p.spans) < 1<<16 {
			fill(dst, p.spans, p.names)
			continue
		}
		half := len(p.spans) / 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			fill(dst[half:], p.spans[half:], p.names)
		}()
		fill(dst[:half], p.spans[:half], p.names)
	}
	wg.Wait()
	return out
}
