package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// shipWait bounds shipping one task's spans to the master.
const shipWait = 30 * time.Second

// shipTrace is instance.Config.ShipTrace: it sends rank 0's spans of a
// task to the master and announces the task with its ranks (rank 0 here
// when ranks is empty), off the request's goroutine.
func (a *Agent) shipTrace(task, kind string, spans []trace.Span, ranks []state.ShardRange, errText string) {
	tr := []wire.TraceRank{{Rank: 0, Node: a.identity.NodeID}}
	if len(ranks) > 0 {
		tr = tr[:0]
		for _, rk := range ranks {
			tr = append(tr, wire.TraceRank{Rank: rk.Rank, Node: rk.NodeID})
		}
	}
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), shipWait)
		defer cancel()
		sh := a.newShipper(task, tr[0].Rank)
		sh.Add(spans...)
		if err := sh.Finish(ctx); err != nil {
			a.log.Warn("ship trace", "task", task, "err", err)
		}
		t := &wire.TraceTask{Task: task, Kind: kind, Ranks: tr, Error: truncate(errText, 1024)}
		if _, err := a.node.ShipTrace(ctx, t); err != nil {
			a.log.Warn("announce trace", "task", task, "err", err)
		}
	}()
}

// shipRank is supervisor.RelayConfig.ShipRank: it ships one rank's spans
// of a task to the master (the announcement comes from rank 0's node).
func (a *Agent) shipRank(task string, rank int, spans []trace.Span) {
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), shipWait)
		defer cancel()
		sh := a.newShipper(task, rank)
		sh.Add(spans...)
		if err := sh.Finish(ctx); err != nil {
			a.log.Warn("ship trace", "task", task, "rank", rank, "err", err)
		}
	}()
}

// onLoaded is supervisor.Config.OnLoaded: a rank's load is traced as its
// own one-rank task, load-<instance>-r<rank>.
func (a *Agent) onLoaded(in state.Instance, rank int, spans []trace.Span) {
	for i := range spans {
		spans[i].Rank = 0 // one-rank task; the name says which rank
	}
	a.shipTrace(fmt.Sprintf("load-%s-r%d", in.InstanceID, rank), "load", spans, nil, "")
}
