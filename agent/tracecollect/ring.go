package tracecollect

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-cluster/orrery/cluster/ringbench"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Tracing of the ring benchmark (cluster/ringbench): every rank ships its
// hops as spans (RingRank), and the coordinator announces the run
// (AnnounceRing), so that the master merges one trace: one process per
// node, one lane per rank, send and recv spans per hop with a flow from
// each send to its receive, link MB/s and memory counters.

// announceWait bounds the coordinator's announcement of a ring run.
const announceWait = 5 * time.Second

// RingTrace says where a ring run's trace went.
type RingTrace struct {
	// ID names the trace; Master keeps it; Saved says it is already
	// stored (known only when this node is the master).
	ID, Master string
	Saved      bool
}

// AnnounceRing announces a ring run coordinated here (with its error, if
// it failed) and, when this node is the master, waits for its merge, so
// that its trace can be opened at once. It returns the zero RingTrace when
// the announcement failed (logged).
func (t *Tracer) AnnounceRing(ctx context.Context, res ringbench.Result, runErr error) RingTrace {
	task := &wire.TraceTask{Task: res.Bench, Kind: "ring-bench"}
	for i, id := range res.Order {
		task.Ranks = append(task.Ranks, wire.TraceRank{Rank: i, Node: id})
	}
	if runErr != nil {
		task.Error = truncate(runErr.Error(), maxErrorText)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), announceWait)
	defer cancel()
	master, err := t.router.Task(sctx, task)
	if err != nil {
		t.log.Warn("announce ring-bench trace", "task", res.Bench, "err", err)
		return RingTrace{}
	}
	out := RingTrace{ID: res.Bench, Master: master}
	if runErr != nil || master != t.cfg.Self {
		return out
	}
	wctx, cancel := context.WithTimeout(ctx, t.cfg.MergeTimeout+2*time.Second)
	defer cancel()
	if r, err := t.collector.Wait(wctx, res.Bench); err != nil {
		t.log.Warn("ring-bench trace", "task", res.Bench, "err", err)
	} else {
		out.Saved = r.Err == nil
	}
	return out
}

// RingRank is ringbench.Config.OnRank: this node's rank of a ring
// benchmark records its hops and ships them to the master when it is done.
func (t *Tracer) RingRank(start wire.RingStart) func(*wire.RingReport, error) {
	rank := slices.Index(start.Order, t.cfg.Self)
	if start.NoTrace || rank < 0 {
		return nil
	}
	sh := t.newShipper(start.Bench, rank, true)
	return func(rep *wire.RingReport, err error) {
		if rep != nil {
			spans := ringSpans(start, rank, rep, t.cfg.Self)
			sh.Add(spans...)
			sh.AddCounters(sentTracks(t.cfg.Self, spans, func(r int) string {
				if r >= 0 && r < len(start.Order) {
					return start.Order[r]
				}
				return ""
			})...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), shipWait)
		defer cancel()
		if serr := sh.Finish(ctx); serr != nil {
			t.log.Warn("ship ring-bench trace", "task", start.Bench, "rank", rank, "err", serr)
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
