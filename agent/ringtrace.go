package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// ringBench runs the ring benchmark coordinated by this node. Unless
// noTrace, every rank ships its spans to the master (ringRankRun) and this
// node announces the run there, so that the master merges one trace: one
// process per node, one lane per rank, send and recv spans per hop with a
// flow from each send to its receive, link MB/s and memory counters. When
// this node is the master it waits for the merge, so that the trace id it
// returns can be opened at once.
func (a *Agent) ringBench(ctx context.Context, size, rounds int, noTrace bool) (api.RingBenchResult, error) {
	res, err := a.node.RingBench(ctx, size, rounds, noTrace)
	out := api.RingBenchResult{RingResult: res}
	if res.Bench == "" || noTrace {
		return out, err
	}
	task := &wire.TraceTask{Task: res.Bench, Kind: "ring-bench"}
	for i, id := range res.Order {
		task.Ranks = append(task.Ranks, wire.TraceRank{Rank: i, Node: id})
	}
	if err != nil {
		task.Error = truncate(err.Error(), 1024)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	master, serr := a.node.ShipTrace(sctx, task)
	if serr != nil {
		a.log.Warn("announce ring-bench trace", "task", res.Bench, "err", serr)
		return out, err
	}
	out.TraceID, out.TraceMaster = res.Bench, master
	if err != nil {
		return out, fmt.Errorf("%w (its partial trace %s goes to the master, %s)", err, res.Bench, master)
	}
	if master == a.identity.NodeID {
		wctx, cancel := context.WithTimeout(ctx, a.cfg.TraceMergeTimeout+2*time.Second)
		defer cancel()
		if r, werr := a.collector.Wait(wctx, res.Bench); werr != nil {
			a.log.Warn("ring-bench trace", "task", res.Bench, "err", werr)
		} else {
			out.TraceSaved = r.Err == nil
		}
	}
	return out, nil
}

// ringRankRun is cluster.Config.RingRun: this node's rank of a ring
// benchmark records its hops and ships them to the master when it is done.
func (a *Agent) ringRankRun(start wire.RingStart) func(*wire.RingReport, error) {
	rank := slices.Index(start.Order, a.identity.NodeID)
	if start.NoTrace || rank < 0 {
		return nil
	}
	sh := a.newShipper(start.Bench, rank)
	return func(rep *wire.RingReport, err error) {
		if rep != nil {
			sh.Add(ringSpans(start, rank, rep, a.identity.NodeID)...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if serr := sh.Finish(ctx); serr != nil {
			a.log.Warn("ship ring-bench trace", "task", start.Bench, "rank", rank, "err", serr)
		}
	}
}

// ringSpans turns one rank's hop timings into spans: a send span (first
// byte until the ack) and a recv span per round, each end of a hop carrying
// the same flow id so that the merged trace draws an arrow.
func ringSpans(start wire.RingStart, rank int, rep *wire.RingReport, node string) []trace.Span {
	n := len(start.Order)
	to, from := (rank+1)%n, (rank+n-1)%n
	size := int64(start.Size)
	var spans []trace.Span
	for _, h := range rep.Hops {
		if h.SendStartNs != 0 {
			spans = append(spans, trace.Span{
				Name: fmt.Sprintf("send → rank %d", to), Cat: "ring/send", Node: node, Rank: rank,
				StartNs: h.SendStartNs, DurNs: h.AckNs - h.SendStartNs,
				Args: trace.Send(to, size, trace.FlowKey(rank, to, uint64(h.Round))),
			})
		}
		if h.RecvStartNs != 0 {
			spans = append(spans, trace.Span{
				Name: fmt.Sprintf("recv ← rank %d", from), Cat: "ring/recv", Node: node, Rank: rank,
				StartNs: h.RecvStartNs, DurNs: h.RecvEndNs - h.RecvStartNs,
				Args: trace.Recv(from, size, trace.FlowKey(from, rank, uint64(h.Round))),
			})
		}
	}
	return spans
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
