package cluster

import (
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Replication: every node submits its local events to the master, which
// gives each the next global index, applies it and sends it to every peer.
// A node that falls behind fetches the events it missed, or the master's
// snapshot when they are no longer kept or it has followed a new master.

// Publish submits a local event: applied at once on the master, sent to
// the master otherwise (queued, bounded, while there is no master link).
func (n *Node) Publish(ev wire.RawEvent) error {
	n.mu.Lock()
	master := n.master
	if master != n.cfg.NodeID {
		c := n.out[master]
		if c == nil {
			if len(n.pending) >= sendQueueLen {
				n.pending = n.pending[1:] // samples are superseded; keep the newest
			}
			n.pending = append(n.pending, ev)
			n.mu.Unlock()
			return nil
		}
		n.mu.Unlock()
		return c.send(&wire.Submit{Events: []wire.RawEvent{ev}})
	}
	n.mu.Unlock()
	return n.indexAndBroadcast([]wire.RawEvent{ev})
}

// indexAndBroadcast is the master's path: give events the next indices,
// apply them locally, send them to every peer.
func (n *Node) indexAndBroadcast(evs []wire.RawEvent) error {
	n.appMu.Lock()
	next := n.cfg.App.LastIdx() + 1
	batch := make([]wire.IndexedEvent, len(evs))
	for i, e := range evs {
		batch[i] = wire.IndexedEvent{Idx: next + int64(i), Type: e.Type, Event: e.Event}
	}
	err := n.cfg.App.Apply(batch)
	n.appMu.Unlock()
	if err != nil {
		return fmt.Errorf("apply as master: %w", err)
	}
	msg := &wire.Events{MasterID: n.cfg.NodeID, Events: batch}
	n.mu.Lock()
	conns := n.outLocked()
	n.mu.Unlock()
	for _, c := range conns {
		c.send(msg) // a failed send drops the conn; the peer refetches
	}
	return nil
}

// flushPending sends the events queued while there was no master link, or
// indexes them when this node has become the master.
func (n *Node) flushPending(master string, isMaster bool) {
	n.mu.Lock()
	var flush []wire.RawEvent
	var masterConn *conn
	if len(n.pending) > 0 {
		if isMaster {
			flush, n.pending = n.pending, nil
		} else if masterConn = n.out[master]; masterConn != nil {
			flush, n.pending = n.pending, nil
		}
	}
	n.mu.Unlock()
	switch {
	case len(flush) == 0:
	case isMaster:
		if err := n.indexAndBroadcast(flush); err != nil {
			n.log.Warn("index queued events", "err", err)
		}
	default:
		masterConn.send(&wire.Submit{Events: flush})
	}
}

// handle runs one control-link message (not liveness) on the link's
// worker goroutine.
func (n *Node) handle(c *conn, msg any) {
	switch m := msg.(type) {
	case *wire.Submit:
		if n.Master() != n.cfg.NodeID {
			return // the sender will learn the master from our heartbeats
		}
		if err := n.indexAndBroadcast(m.Events); err != nil {
			n.log.Warn("index submitted events", "from", c.peer, "err", err)
		}
	case *wire.Events:
		n.onEvents(m)
	case *wire.Fetch:
		n.onFetch(c, m)
	case *wire.Snapshot:
		n.onSnapshot(m)
	default:
		n.log.Debug("unexpected message on a control link", "peer", c.peer, "type", fmt.Sprintf("%T", msg))
	}
}

func (n *Node) onEvents(m *wire.Events) {
	n.mu.Lock()
	master, resync := n.master, n.needResync
	n.mu.Unlock()
	if m.MasterID != master || master == n.cfg.NodeID || len(m.Events) == 0 || resync {
		return // from a master we do not follow (yet)
	}
	n.appMu.Lock()
	next := n.cfg.App.LastIdx() + 1
	evs := m.Events
	for len(evs) > 0 && evs[0].Idx < next {
		evs = evs[1:] // already applied
	}
	var err error
	gap := len(evs) > 0 && evs[0].Idx > next
	if len(evs) > 0 && !gap {
		err = n.cfg.App.Apply(evs)
	}
	n.appMu.Unlock()
	switch {
	case gap:
		n.sendTo(master, &wire.Fetch{Since: next})
	case err != nil:
		n.log.Warn("apply events from master; resyncing", "err", err)
		n.requestSnapshot(master)
	}
}

// catchUp fetches what we miss when our master's heartbeat says it is
// ahead: events and snapshots travel on different links and can cross, and
// a quiet master sends no new event that would reveal the gap.
func (n *Node) catchUp(hb *wire.Heartbeat) {
	n.mu.Lock()
	follows := hb.NodeID == n.master && n.master != n.cfg.NodeID
	resync := n.needResync
	n.mu.Unlock()
	if !follows {
		return
	}
	if resync {
		n.requestSnapshot(hb.NodeID)
		return
	}
	n.appMu.Lock()
	last := n.cfg.App.LastIdx()
	n.appMu.Unlock()
	if hb.LastIdx > last {
		n.sendTo(hb.NodeID, &wire.Fetch{Since: last + 1})
	}
}

// requestSnapshot asks master for its whole state, at most once per
// heartbeat.
func (n *Node) requestSnapshot(master string) {
	n.mu.Lock()
	c := n.out[master]
	if c == nil || time.Since(n.resyncAt) < n.cfg.Heartbeat {
		n.mu.Unlock()
		return
	}
	n.resyncAt = time.Now()
	n.mu.Unlock()
	c.send(&wire.Fetch{Since: 0, Snapshot: true})
}

// sendTo queues msg on our control link to peer, if there is one.
func (n *Node) sendTo(peer string, msg wire.Message) {
	n.mu.Lock()
	c := n.out[peer]
	n.mu.Unlock()
	if c != nil {
		c.send(msg)
	}
}

// onFetch is the master's answer to a Fetch: the events asked for while
// it keeps them, else its snapshot.
func (n *Node) onFetch(c *conn, m *wire.Fetch) {
	if n.Master() != n.cfg.NodeID {
		return
	}
	if !m.Snapshot {
		n.appMu.Lock()
		evs, ok := n.cfg.App.EventsSince(m.Since, fetchBatch)
		n.appMu.Unlock()
		if ok {
			if len(evs) > 0 {
				c.send(&wire.Events{MasterID: n.cfg.NodeID, Events: evs})
			}
			return
		}
	}
	n.appMu.Lock()
	idx, st, err := n.cfg.App.Snapshot()
	n.appMu.Unlock()
	if err != nil {
		n.log.Warn("snapshot for peer", "peer", c.peer, "err", err)
		return
	}
	c.send(&wire.Snapshot{MasterID: n.cfg.NodeID, LastIdx: idx, State: st})
}

func (n *Node) onSnapshot(m *wire.Snapshot) {
	n.mu.Lock()
	follow := m.MasterID == n.master && n.master != n.cfg.NodeID
	n.mu.Unlock()
	if !follow {
		return
	}
	n.appMu.Lock()
	err := n.cfg.App.Restore(m.LastIdx, m.State)
	n.appMu.Unlock()
	if err != nil {
		n.log.Warn("restore snapshot from master", "master", m.MasterID, "err", err)
		return
	}
	n.mu.Lock()
	if n.master == m.MasterID {
		n.needResync = false
	}
	n.mu.Unlock()
	n.log.Info("state restored from master", "master", m.MasterID, "lastIdx", m.LastIdx)
}
