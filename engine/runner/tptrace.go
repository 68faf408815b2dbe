package runner

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// A tensor-parallel group's other ranks trace the steps of a traced
// request too: rank 0 tells them when a slot's trace begins (its id) and
// ends (no id), and each records its own compute and all-reduce spans and
// its links' bytes, then hands them to the agent as a pipeline stage does.

// tpTrace is the control message that begins or ends a slot's trace.
const tpTrace byte = 4

// maxTraceID bounds a trace id in a control message (ids are short:
// ident.ValidTraceID).
const maxTraceID = 256

// slotTracer is a Forwarder whose other ranks trace a slot's steps
// themselves (a tensor-parallel leader's followers).
type slotTracer interface {
	traceSlot(slot int, id string) error
}

// traceSlot tells f's other ranks, if it has any that trace, that slot's
// steps are traced as id from now on ("": its trace ends).
func traceSlot(f Forwarder, slot int, id string) error {
	if t, ok := f.(slotTracer); ok {
		return t.traceSlot(slot, id)
	}
	return nil
}

// followTraces are follower f's open traces, by slot (of slots).
type followTraces struct {
	f     *TPFollower
	slots int
	open  map[int]*followTrace
}

type followTrace struct {
	id   string
	rec  *trace.Recorder
	stop func()
}

// control applies a tpTrace message (after its type byte).
func (ft *followTraces) control(msg []byte) error {
	if len(msg) < 4 || len(msg) > 4+maxTraceID {
		return fmt.Errorf("tensor-parallel follower: a trace message of %d bytes", len(msg)+1)
	}
	slot := int(int32(binary.LittleEndian.Uint32(msg)))
	if slot < 0 || slot >= ft.slots {
		return fmt.Errorf("tensor-parallel follower: a trace for slot %d of %d", slot, ft.slots)
	}
	ft.end(slot, nil)
	if id := string(msg[4:]); id != "" && ft.f.OnTrace != nil {
		if ft.open == nil {
			ft.open = map[int]*followTrace{}
		}
		rec := trace.NewRecorder(ft.f.Rank, ft.f.Node, trace.Options{NodeName: ft.f.NodeName})
		ft.open[slot] = &followTrace{id: id, rec: rec, stop: sampleMesh(rec, ft.f.Mesh, ft.f.First)}
	}
	return nil
}

// end hands slot's trace, if open, to onTrace.
func (ft *followTraces) end(slot int, err error) {
	t := ft.open[slot]
	if t == nil {
		return
	}
	delete(ft.open, slot)
	t.stop()
	ft.f.OnTrace(t.id, t.rec.Drain(0), t.rec.DrainCounters(), err)
}

func (ft *followTraces) endAll(err error) {
	for slot := range ft.open {
		ft.end(slot, err)
	}
}

// step records a forward pass from start to now in the trace of every
// traced slot with rows in it, as rank 0 does: a "decode" span (one row of
// the slot) or a "prefill" one, holding the pass's compute and its
// all-reduces.
func (ft *followTraces) step(seqs []int, start time.Time, comms []collective.Timing) {
	if len(ft.open) == 0 {
		return
	}
	end := time.Now()
	if seqs == nil {
		seqs = []int{0}
	}
	rows := map[int]int{}
	for _, s := range seqs {
		if ft.open[s] != nil {
			rows[s]++
		}
	}
	for s, n := range rows {
		rec := ft.open[s].rec
		name, cat := "token step", "decode"
		if n > 1 {
			name, cat = fmt.Sprintf("prefill %d rows", n), "prefill"
		}
		phase := rec.StartAt(name, cat, start)
		c := phase.ChildAt("compute", "compute", start)
		c.EndAt(trace.Args{}, end)
		for _, x := range comms {
			r := phase.ChildAt("all-reduce", "comms", x.Start)
			r.EndAt(trace.Args{}.WithBytes(int64(x.Bytes)), x.End)
		}
		phase.EndAt(trace.Args{}, end)
	}
}
