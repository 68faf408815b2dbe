package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Trace collection: every rank ships its spans to the master, which merges
// them (the agent does, through Config.OnTrace). The cluster layer only
// carries the messages; their span payload is opaque here.

// traceInFlight bounds the frames queued on the master link while a trace
// ships, so that a large trace neither fills the send queue (which drops
// the link) nor delays a heartbeat by more than this many chunks.
const traceInFlight = 8

// ShipTrace sends a *wire.TraceTask or *wire.TraceChunk to the current
// master, or hands it to Config.OnTrace directly when this node is the
// master. It waits (bounded by ctx) while the master link is busy, and a
// little for a master link still being set up. It returns the master's id.
func (n *Node) ShipTrace(ctx context.Context, msg any) (string, error) {
	switch m := msg.(type) {
	case *wire.TraceTask:
		if err := m.Validate(); err != nil {
			return "", fmt.Errorf("ship trace: %w", err)
		}
	case *wire.TraceChunk:
		if err := m.Validate(); err != nil {
			return "", fmt.Errorf("ship trace: %w", err)
		}
	default:
		return "", fmt.Errorf("ship trace: not a trace message: %T", msg)
	}
	n.mu.Lock()
	master := n.master
	n.mu.Unlock()
	if master == n.cfg.NodeID {
		if n.cfg.OnTrace != nil {
			n.cfg.OnTrace(master, msg)
		}
		return master, nil
	}
	conns, err := n.waitLinks(ctx, []string{master})
	if err != nil {
		return master, fmt.Errorf("ship trace to master %s: %w", master, err)
	}
	c := conns[master]
	for len(c.queue) >= traceInFlight {
		select {
		case <-ctx.Done():
			return master, fmt.Errorf("ship trace to master %s: %w", master, ctx.Err())
		case <-c.done:
			return master, fmt.Errorf("ship trace to master %s: link closed", master)
		case <-time.After(2 * time.Millisecond):
		}
	}
	if err := c.send(msg); err != nil {
		return master, fmt.Errorf("ship trace to master %s: %w", master, err)
	}
	return master, nil
}

// onTrace passes a peer's trace message on, if this node is the master.
func (n *Node) onTrace(from string, msg any) {
	n.mu.Lock()
	isMaster := n.master == n.cfg.NodeID
	n.mu.Unlock()
	if !isMaster {
		// The sender's view of the master was stale; the master's merge
		// will time out and record the rank as missing.
		n.log.Warn("trace message for the master, but this node is not it", "from", from)
		return
	}
	if n.cfg.OnTrace != nil {
		n.cfg.OnTrace(from, msg)
	}
}
