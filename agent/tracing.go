package agent

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracecollect"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Tracing glue: ranks ship spans with a tracecollect.Shipper over the
// cluster to the master, whose Collector merges them and saveTrace stores
// the result.

// onTrace is cluster.Config.OnTrace: trace messages that reach the master.
func (a *Agent) onTrace(from string, msg any) {
	var err error
	switch m := msg.(type) {
	case *wire.TraceTask:
		err = a.collector.Task(from, m)
	case *wire.TraceChunk:
		err = a.collector.Chunk(from, m)
	}
	if err != nil {
		a.log.Warn("trace from rank", "from", from, "err", err)
	}
}

// newShipper starts tracing this node's rank of task.
func (a *Agent) newShipper(task string, rank int) *tracecollect.Shipper {
	return tracecollect.NewShipper(tracecollect.ShipperConfig{
		Task: task, Rank: rank, Node: a.identity.NodeID,
		Send: func(ctx context.Context, msg any) error {
			_, err := a.node.ShipTrace(ctx, msg)
			return err
		},
		LinkBytes: a.node.BytesSent,
		Options:   trace.Options{NodeName: a.identity.FriendlyName},
	})
}

// clockOffsets is every peer's clock minus ours, from the link probes.
func (a *Agent) clockOffsets() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, l := range a.node.Links() {
		if l.Probes > 0 {
			out[l.PeerID] = l.ClockOffset
		}
	}
	return out
}

// saveTrace stores a merged trace: it names each node's process after the
// node, names link tracks by friendly names, and adds every node's memory
// during the task (from the replicated memory history) as counter tracks.
func (a *Agent) saveTrace(tr *trace.Trace, info tracecollect.Info) error {
	st := a.store.State()
	offsets := a.clockOffsets()
	nodes := map[string]bool{}
	for _, n := range info.Ranks {
		nodes[n] = true
	}
	name := func(id string) string {
		if ident, ok := st.NodeIdentities[id]; ok && ident.FriendlyName != "" {
			return fmt.Sprintf("%s (%.8s)", ident.FriendlyName, id)
		}
		return id
	}
	tr.Processes = map[string]string{}
	for id := range nodes {
		tr.Processes[id] = name(id)
	}
	// A link track sits on its sending node's process: name it by the
	// receiving end (friendly names alone may repeat, e.g. on one machine).
	for i := range tr.Counters {
		c := &tr.Counters[i]
		if rest, ok := strings.CutPrefix(c.Name, "link "); ok {
			if _, to, ok := strings.Cut(rest, "→"); ok {
				c.Name = "link → " + name(to)
			}
		}
	}
	var first, last int64
	for _, s := range tr.Spans {
		if first == 0 || s.StartNs < first {
			first = s.StartNs
		}
		last = max(last, s.EndNs())
	}
	if first != 0 {
		tr.Counters = append(tr.Counters, memoryCounters(a.store.History(), nodes, offsets, first, last)...)
	}
	meta := tracestore.Meta{TaskID: tr.TaskID, Kind: info.Kind, Spans: len(tr.Spans), Nodes: len(nodes),
		Partial: len(info.Missing) > 0, MissingRanks: info.Missing, Error: info.Error}
	_, err := a.traces.Save(meta, func(w io.Writer) error { return trace.WriteChrome(w, tr) })
	return err
}

// memoryCounters are the memory-use samples of nodes from a second before
// first until a second after last (our clock), each moved from its node's
// clock onto ours.
func memoryCounters(hist *state.MemoryHistory, nodes map[string]bool, offsets map[string]time.Duration, first, last int64) []trace.CounterSample {
	var out []trace.CounterSample
	for id := range nodes {
		samples, _ := hist.Get(id)
		for _, m := range samples {
			t := m.T.UnixNano() - int64(offsets[id])
			if t < first-int64(time.Second) || t > last+int64(time.Second) || m.RAMTotal == nil || m.RAMAvailable == nil {
				continue
			}
			out = append(out, trace.MemorySample(id, time.Unix(0, t), float64(m.RAMTotal.InBytes-m.RAMAvailable.InBytes)))
		}
	}
	return out
}
