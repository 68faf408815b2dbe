package tracecollect

import (
	"fmt"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// The counter tracks a merged trace gets on the master: link tracks
// named by their other end, and each node's memory.

// nameLinks names each "link a→b" track by its other end: "link → b" on
// the sending node's process, "link ← a" where the receiving node
// measured it. Friendly names alone may repeat (e.g. on one machine):
// name gives them with the id's start.
func nameLinks(cs []trace.CounterSample, name func(id string) string) {
	for i := range cs {
		c := &cs[i]
		rest, ok := strings.CutPrefix(c.Name, "link ")
		if !ok {
			continue
		}
		if from, to, ok := strings.Cut(rest, "→"); ok {
			if to == c.Node {
				c.Name = "link ← " + name(from)
			} else {
				c.Name = "link → " + name(to)
			}
		}
	}
}

// MemoryTrack names a node's memory track; WholeMachineTrack where the
// node shares its machine with other nodes of the trace, so that the
// figure is not read as the node's own.
const (
	MemoryTrack       = "memory"
	WholeMachineTrack = "memory (whole machine)"
)

// sharedMachines are the nodes of a trace that run on one machine with
// another of its nodes: same friendly name (the host's name), chip and
// memory size.
func sharedMachines(st state.State, nodes map[string]bool) map[string]bool {
	key := func(id string) string {
		n := st.NodeIdentities[id]
		if n.FriendlyName == "" || n.RAMTotal == nil {
			return ""
		}
		return fmt.Sprintf("%s\x00%s\x00%d", n.FriendlyName, n.ChipID, n.RAMTotal.InBytes)
	}
	count := map[string]int{}
	for id := range nodes {
		if k := key(id); k != "" {
			count[k]++
		}
	}
	out := map[string]bool{}
	for id := range nodes {
		if k := key(id); k != "" && count[k] > 1 {
			out[id] = true
		}
	}
	return out
}

// memoryCounters are the memory use of each node during [first, last]
// (our clock): every sample of the 0.5 s sampler in it, moved from the
// node's clock onto ours, plus one at first and one at last holding the
// value sampled last before them (or the first after, when none came
// before).
func memoryCounters(hist *state.MemoryHistory, nodes, shared map[string]bool, offsets map[string]time.Duration, first, last int64) []trace.CounterSample {
	var out []trace.CounterSample
	for id := range nodes {
		samples, _ := hist.Get(id)
		name := MemoryTrack
		if shared[id] {
			name = WholeMachineTrack
		}
		var atFirst, atLast *trace.CounterSample
		var in []trace.CounterSample
		for _, m := range samples {
			if m.RAMTotal == nil || m.RAMAvailable == nil {
				continue
			}
			t := m.T.UnixNano() - int64(offsets[id])
			c := trace.CounterSample{Node: id, Name: name, Unit: "bytes", TsNs: t, Value: float64(m.RAMTotal.InBytes - m.RAMAvailable.InBytes)}
			switch {
			case t <= first:
				atFirst = &c
			case t <= last:
				in = append(in, c)
				if atFirst == nil {
					atFirst = &c
				}
			}
			if t <= last {
				atLast = &c
			} else if atLast == nil {
				atLast = &c
			}
		}
		if atFirst == nil {
			atFirst = atLast
		}
		if atFirst == nil {
			continue
		}
		a, z := *atFirst, *atLast
		a.TsNs, z.TsNs = first, last
		out = append(out, a)
		out = append(out, in...)
		out = append(out, z)
	}
	return out
}
