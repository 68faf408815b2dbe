package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrOutOfOrder is returned when an event's index is not the next one.
var ErrOutOfOrder = errors.New("event out of order")

// ErrCompacted is returned by Since when the asked-for events have already
// been dropped by the log's retention limit; the reader should fetch a
// snapshot (GET /state) and continue from its lastEventAppliedIdx.
var ErrCompacted = errors.New("events no longer retained")

// DefaultLogRetention is how many events a Log keeps in memory. At the
// default sampling rates (about 3.5 events/s per node) that is ~20 minutes
// for one node.
const DefaultLogRetention = 4096

// Log is an append-only, indexed event log with bounded retention. It is
// safe for concurrent use.
type Log struct {
	mu      sync.Mutex // guards the fields below
	buf     []Indexed  // ring: event i lives at buf[i % len(buf)]
	count   int        // retained events, ≤ len(buf)
	first   int64      // index of the oldest retained event
	next    int64      // index the next event must have
	changed chan struct{}
}

// NewLog returns an empty log keeping the last retain events (retain > 0).
func NewLog(retain int) *Log {
	if retain <= 0 {
		retain = DefaultLogRetention
	}
	return &Log{buf: make([]Indexed, retain), changed: make(chan struct{})}
}

// Reset empties the log so that the next event must carry index next; used
// when the state is replaced by a snapshot. Waiters are woken.
func (l *Log) Reset(next int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.buf)
	l.count = 0
	l.first, l.next = next, next
	close(l.changed)
	l.changed = make(chan struct{})
}

// First returns the index of the oldest retained event.
func (l *Log) First() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// Next returns the index the next appended event must carry.
func (l *Log) Next() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Append adds ie, which must carry index Next().
func (l *Log) Append(ie Indexed) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ie.Idx != l.next || ie.Idx < 0 {
		return fmt.Errorf("%w: append %d, want %d", ErrOutOfOrder, ie.Idx, l.next)
	}
	l.buf[ie.Idx%int64(len(l.buf))] = ie
	if l.count < len(l.buf) {
		l.count++
	} else {
		l.first++
	}
	l.next++
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// Since returns up to max events with index ≥ idx, in order (max ≤ 0 means
// all retained). It returns ErrCompacted if idx is older than what is kept.
func (l *Log) Since(idx int64, max int) ([]Indexed, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if idx < 0 {
		idx = 0
	}
	if idx < l.first {
		return nil, fmt.Errorf("%w: asked for %d, oldest kept is %d", ErrCompacted, idx, l.first)
	}
	n := l.next - idx
	if n <= 0 {
		return nil, nil
	}
	if max > 0 && n > int64(max) {
		n = int64(max)
	}
	out := make([]Indexed, 0, n)
	for i := idx; i < idx+n; i++ {
		out = append(out, l.buf[i%int64(len(l.buf))])
	}
	return out, nil
}

// Wait blocks until the log holds an event with index ≥ idx, or ctx ends.
func (l *Log) Wait(ctx context.Context, idx int64) error {
	for {
		l.mu.Lock()
		if l.next > idx {
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
