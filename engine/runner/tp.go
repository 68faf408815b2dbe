package runner

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// A tensor-parallel group of T ranks runs each forward pass together: every
// rank holds a slice of every block (model.TPSlice) and the all-reduces in
// the pass (backend.Collective, over the group's mesh) keep them in step.
// Rank 0 leads: it runs the scheduler and samples, and each call on its
// Forwarder (a step, a cache edit) goes first to the other ranks as a
// control message, which they replay on their own slice (TPFollower).

// Control messages, leader to followers.
const (
	tpForward byte = 1
	tpRemove  byte = 2
	tpShift   byte = 3
	// tpTrace (4) begins or ends a slot's trace: tptrace.go.
)

// TPLeader is rank 0 of a tensor-parallel group as a Forwarder.
type TPLeader struct {
	F      Forwarder
	Mesh   *collective.Mesh
	buf    []byte
	traced map[int]bool // slots whose followers trace (traceSlot)
}

var _ Forwarder = (*TPLeader)(nil)

func (l *TPLeader) Config() model.Config     { return l.F.Config() }
func (l *TPLeader) Options() backend.Options { return l.F.Options() }

func (l *TPLeader) Forward(ctx context.Context, b backend.Batch) (backend.Result, error) {
	l.buf = appendBatch(l.buf[:0], b)
	if err := l.Mesh.Send(l.buf); err != nil {
		return backend.Result{}, groupLost(err)
	}
	res, err := l.F.Forward(ctx, b)
	return res, groupLost(err)
}

func (l *TPLeader) Remove(seq, from int) error {
	if err := l.Mesh.Send(tpEdit(tpRemove, seq, from, 0)); err != nil {
		return groupLost(err)
	}
	return l.F.Remove(seq, from)
}

func (l *TPLeader) Shift(seq, keep, discard int) error {
	if err := l.Mesh.Send(tpEdit(tpShift, seq, keep, discard)); err != nil {
		return groupLost(err)
	}
	return l.F.Shift(seq, keep, discard)
}

// commTimings are the all-reduces of the last Forward, for its trace.
func (l *TPLeader) commTimings() []collective.Timing { return l.Mesh.TakeTimings() }

// commLogger is a Forwarder whose forward passes communicate inside
// (a tensor-parallel leader): Local records each exchange as a span.
type commLogger interface {
	commTimings() []collective.Timing
}

// groupLost makes a broken group's error a lost rank link, which ends the
// runner as a broken pipeline does: the instance fails, naming the rank.
func groupLost(err error) error {
	if err != nil && errors.Is(err, collective.ErrLinkLost) && !errors.Is(err, ErrLinkLost) {
		return fmt.Errorf("%w: %w", ErrLinkLost, err)
	}
	return err
}

// TPFollower is a rank > 0 of a tensor-parallel group: it replays the
// leader's calls on its slice until the mesh breaks or ctx ends.
type TPFollower struct {
	F    Forwarder
	Mesh *collective.Mesh
	// Traces of the leader's traced slots: Rank is this rank's in the
	// instance, First its group's rank 0's; OnTrace gets each one's spans
	// and counters when it ends (nil: none recorded).
	Rank, First    int
	Node, NodeName string
	OnTrace        func(traceID string, spans []trace.Span, counters []trace.CounterSample, err error)
}

// Serve runs the follower. A failed forward pass ends it (the leader's
// all-reduce then fails too): the ranks' caches would no longer agree.
func (f *TPFollower) Serve(ctx context.Context) (err error) {
	stop := context.AfterFunc(ctx, f.Mesh.Close)
	defer stop()
	ft := &followTraces{f: f, slots: max(f.F.Options().Parallel, 1)}
	defer func() { ft.endAll(err) }()
	for {
		msg, err := f.Mesh.Recv(0)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if len(msg) == 0 {
			return errors.New("tensor-parallel follower: an empty control message")
		}
		switch msg[0] {
		case tpForward:
			b, err := readBatch(msg[1:])
			if err != nil {
				return fmt.Errorf("tensor-parallel follower: %w", err)
			}
			before, start := f.Mesh.Reduces, time.Now()
			_, err = f.F.Forward(ctx, b)
			ft.step(b.Seqs, start, f.Mesh.TakeTimings())
			if err != nil {
				if f.Mesh.Reduces == before && !errors.Is(err, collective.ErrLinkLost) {
					continue // refused before the pass began, as the leader's was
				}
				return fmt.Errorf("tensor-parallel forward: %w", err)
			}
		case tpRemove, tpShift:
			if len(msg) != 13 {
				return fmt.Errorf("tensor-parallel follower: a cache edit of %d bytes", len(msg))
			}
			u := func(i int) int { return int(int32(binary.LittleEndian.Uint32(msg[1+4*i:]))) }
			// The leader got the same answer for the same cache: an error
			// (ErrCannotKeep) is its to report.
			if msg[0] == tpRemove {
				f.F.Remove(u(0), u(1))
			} else {
				f.F.Shift(u(0), u(1), u(2))
			}
		case tpTrace:
			if err := ft.control(msg[1:]); err != nil {
				return err
			}
		default:
			return fmt.Errorf("tensor-parallel follower: control message of type %d", msg[0])
		}
	}
}

func tpEdit(typ byte, a, b, c int) []byte {
	m := []byte{typ}
	for _, v := range []int{a, b, c} {
		m = binary.LittleEndian.AppendUint32(m, uint32(int32(v)))
	}
	return m
}

// appendBatch encodes a batch: type, flags, then the lengths and values of
// tokens, hidden states, positions, sequences and output rows.
func appendBatch(m []byte, b backend.Batch) []byte {
	m = append(m, tpForward)
	var flags byte
	if b.AllLogits {
		flags |= 1
	}
	if b.Outputs != nil {
		flags |= 2
	}
	if b.Seqs != nil {
		flags |= 4
	}
	m = append(m, flags)
	ints := func(v []int32) {
		m = binary.LittleEndian.AppendUint32(m, uint32(len(v)))
		for _, x := range v {
			m = binary.LittleEndian.AppendUint32(m, uint32(x))
		}
	}
	ints(b.Tokens)
	m = binary.LittleEndian.AppendUint32(m, uint32(len(b.Hidden)))
	for _, x := range b.Hidden {
		m = binary.LittleEndian.AppendUint32(m, math.Float32bits(x))
	}
	ints(b.Positions)
	seqs := make([]int32, len(b.Seqs))
	for i, s := range b.Seqs {
		seqs[i] = int32(s)
	}
	ints(seqs)
	ints(b.Outputs)
	return m
}

// readBatch decodes appendBatch's payload (after the type byte).
func readBatch(m []byte) (backend.Batch, error) {
	var b backend.Batch
	if len(m) < 1 {
		return b, errors.New("a step of 0 bytes")
	}
	flags := m[0]
	m = m[1:]
	var err error
	ints := func() []int32 {
		if err != nil {
			return nil
		}
		if len(m) < 4 {
			err = errors.New("a step cut short")
			return nil
		}
		n := int(binary.LittleEndian.Uint32(m))
		m = m[4:]
		if n > len(m)/4 {
			err = fmt.Errorf("a step with %d values in %d bytes", n, len(m))
			return nil
		}
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(m[4*i:]))
		}
		m = m[4*n:]
		return v
	}
	b.Tokens = ints()
	if h := ints(); len(h) > 0 {
		b.Hidden = make([]float32, len(h))
		for i, x := range h {
			b.Hidden[i] = math.Float32frombits(uint32(x))
		}
	}
	b.Positions = ints()
	seqs := ints()
	outs := ints()
	if err != nil {
		return b, err
	}
	if len(m) != 0 {
		return b, fmt.Errorf("a step with %d bytes left over", len(m))
	}
	if len(b.Tokens) == 0 {
		b.Tokens = nil
	}
	b.AllLogits = flags&1 != 0
	if flags&2 != 0 {
		b.Outputs = outs
		if b.Outputs == nil {
			b.Outputs = []int32{}
		}
	}
	if flags&4 != 0 {
		b.Seqs = make([]int, len(seqs))
		for i, s := range seqs {
			b.Seqs[i] = int(s)
		}
	}
	return b, nil
}

func (l *TPLeader) traceSlot(slot int, id string) error {
	if l.traced == nil {
		l.traced = map[int]bool{}
	}
	if id == "" && !l.traced[slot] {
		return nil
	}
	l.traced[slot] = id != ""
	m := binary.LittleEndian.AppendUint32([]byte{tpTrace}, uint32(int32(slot)))
	return groupLost(l.Mesh.Send(append(m, id...)))
}
