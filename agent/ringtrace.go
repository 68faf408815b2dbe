package agent

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// RingBenchResult is the API's ring benchmark answer: the cluster's result
// plus the id of the trace it left in the store.
type RingBenchResult struct {
	cluster.RingResult
	TraceID string `json:"traceId,omitempty"`
}

// ringBench runs the ring benchmark and saves its trace: one process per
// node, one lane per rank, a send span per hop (send until ack) and a recv
// span per receive, a flow from each send to its receive, and the nodes'
// memory during the run. Every node's times are moved onto this node's
// clock by the offset the link probes measured.
func (a *Agent) ringBench(ctx context.Context, size, rounds int) (RingBenchResult, error) {
	res, err := a.node.RingBench(ctx, size, rounds)
	if err != nil {
		return RingBenchResult{}, err
	}
	out := RingBenchResult{RingResult: res}
	tr := ringTrace(res, a.store.State(), a.store.History())
	meta, err := a.traces.Save(tracestore.Meta{TaskID: res.Bench, Kind: "ring-bench", Spans: len(tr.Spans), Nodes: len(res.Order)},
		func(w io.Writer) error { return trace.WriteChrome(w, tr) })
	if err != nil {
		// The benchmark itself worked: report it, and say the trace is lost.
		a.log.Warn("save ring-bench trace", "err", err)
		return out, nil
	}
	out.TraceID = meta.TaskID
	return out, nil
}

// ringTrace builds the trace of one ring benchmark run.
func ringTrace(res cluster.RingResult, st state.State, hist *state.MemoryHistory) *trace.Trace {
	tr := &trace.Trace{TaskID: res.Bench, CreatedAt: time.Now().UTC(), Processes: map[string]string{}}
	rank := map[string]int{}
	for i, id := range res.Order {
		rank[id] = i
		name := id
		if ident, ok := st.NodeIdentities[id]; ok && ident.FriendlyName != "" {
			name = fmt.Sprintf("%s (%.8s)", ident.FriendlyName, id)
		}
		tr.Processes[id] = name
	}
	var first, last int64
	for _, rep := range res.Reports {
		r, ok := rank[rep.From]
		if !ok {
			continue
		}
		to := rank[rep.To]
		from := (r + len(res.Order) - 1) % len(res.Order)
		for _, h := range rep.Hops {
			if h.SendStartNs != 0 {
				tr.Spans = append(tr.Spans, trace.Span{
					Name: fmt.Sprintf("send → rank %d", to), Cat: "ring/send", Node: rep.From, Rank: r,
					StartNs: h.SendStartNs, DurNs: h.AckNs - h.SendStartNs,
					Args: trace.Send(to, int64(res.Size), trace.FlowKey(r, to, uint64(h.Round))),
				})
			}
			if h.RecvStartNs != 0 {
				tr.Spans = append(tr.Spans, trace.Span{
					Name: fmt.Sprintf("recv ← rank %d", from), Cat: "ring/recv", Node: rep.From, Rank: r,
					StartNs: h.RecvStartNs, DurNs: h.RecvEndNs - h.RecvStartNs,
					Args: trace.Recv(from, int64(res.Size), trace.FlowKey(from, r, uint64(h.Round))),
				})
			}
		}
	}
	// Put every node on the coordinator's clock: offset = node − us.
	shift := map[string]time.Duration{}
	for id, off := range res.ClockOffsets {
		shift[id] = -off
	}
	tr.ShiftAll(shift)
	for _, s := range tr.Spans {
		if first == 0 || s.StartNs < first {
			first = s.StartNs
		}
		last = max(last, s.EndNs())
	}
	// Memory of each node around the run (the history is on this node's
	// clock only approximately: samples carry their node's time).
	for _, id := range res.Order {
		samples, _ := hist.Get(id)
		for _, m := range samples {
			t := m.T.UnixNano() - int64(res.ClockOffsets[id])
			if t < first-int64(time.Second) || t > last+int64(time.Second) || m.RAMTotal == nil || m.RAMAvailable == nil {
				continue
			}
			tr.Counters = append(tr.Counters, trace.MemorySample(id, time.Unix(0, t), float64(m.RAMTotal.InBytes-m.RAMAvailable.InBytes)))
		}
	}
	slices.SortFunc(tr.Spans, func(a, b trace.Span) int { return cmp.Compare(a.StartNs, b.StartNs) })
	return tr
}
