package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Failure detection and election run on the node's tick: sweep members
// silent for FailAfter, elect (Elect: the highest term's master, else
// ElectMaster's choice), tell the application what changed. Each heartbeat
// also announces this node, and the master and term it follows, to every
// peer.

const sweepsPerHeartbeat = 4

// tick sweeps silent members and re-elects; on beat it also sends
// heartbeats and probes and flushes queued events.
func (n *Node) tick(ctx context.Context, wg *sync.WaitGroup, beat bool) {
	now := time.Now()
	// A tick long after the last one means this process, or its machine,
	// was stopped (SIGSTOP, a laptop asleep, a stall): its peers' silence
	// meanwhile says nothing about them, and sweeping them all now would
	// make this node its own master, fail their instances and reload their
	// runners once it is back among them. They get FailAfter from now.
	if !n.lastTick.IsZero() && now.Sub(n.lastTick) > n.cfg.FailAfter/2 {
		n.table.Forgive(now)
		n.log.Info("this node was paused; its peers get fail-after from now", "paused", now.Sub(n.lastTick).Round(time.Millisecond))
	}
	n.lastTick = now
	alive, master, isMaster := n.sweepAndElect(now)
	// Dial on every tick, so a peer found by discovery is linked within a
	// quarter heartbeat; dialPeers rate-limits each address itself.
	n.dialPeers(ctx, wg)
	if !beat {
		return
	}
	seq := n.sendHeartbeats(now, alive, master)
	n.keepControlLinks()
	n.ensureProbeLinks(ctx, wg)
	n.ensureBeatLinks(ctx, wg)
	n.sendProbes(seq)
	n.flushPending(master, isMaster)
}

// sweepAndElect drops members silent for too long and their links, elects
// the master among the rest, and tells the application.
func (n *Node) sweepAndElect(now time.Time) (alive []Member, master string, isMaster bool) {
	gone := n.table.Sweep(now)
	alive = n.table.Alive()

	n.mu.Lock()
	for i := range alive {
		if alive[i].Self {
			alive[i].Follows, alive[i].Term = n.master, n.term
		}
	}
	master, term := Elect(n.cfg.NodeID, alive)
	for _, id := range gone {
		if c := n.out[id]; c != nil {
			c.close()
			delete(n.out, id)
		}
		delete(n.links, id)
		if pl := n.probes[id]; pl != nil {
			closeTLS(pl.tc)
		}
		if b := n.beats[id]; b != nil {
			b.close()
		}
		delete(n.learned, id)
	}
	changed := master != n.master
	if term != n.term {
		n.log.Info("election term", "term", term, "master", master)
	}
	n.master, n.term = master, term
	if changed {
		n.needResync = master != n.cfg.NodeID
	}
	resync := n.needResync
	isMaster = master == n.cfg.NodeID
	n.mu.Unlock()

	for _, id := range gone {
		n.log.Info("member gone", "member", id)
		if isMaster {
			n.cfg.App.MemberGone(id)
		}
	}
	if resync {
		n.requestSnapshot(master)
	}
	if changed {
		n.log.Info("master changed", "master", master, "self", isMaster)
		n.cfg.App.MasterChanged(master, isMaster)
	}
	return alive, master, isMaster
}

// sendHeartbeats sends this heartbeat, with the peer addresses we know, to
// every peer we have a control link to; it returns the heartbeat's seq.
func (n *Node) sendHeartbeats(now time.Time, alive []Member, master string) uint64 {
	ids := make([]string, len(alive))
	for i, m := range alive {
		ids[i] = m.NodeID
	}
	n.appMu.Lock()
	idx, hash := n.cfg.App.LastIdx(), n.cfg.App.StateHash()
	n.appMu.Unlock()
	n.mu.Lock()
	n.seq++
	hb := &wire.Heartbeat{NodeID: n.cfg.NodeID, StartedAt: n.cfg.StartedAt, Seq: n.seq, T1: now.UnixNano(),
		MasterID: master, Term: n.term, LastIdx: idx, StateHash: hash, Members: ids}
	for id, c := range n.out {
		hb.Peers = append(hb.Peers, wire.PeerInfo{NodeID: id, Addr: c.addr})
	}
	for id, p := range n.learned {
		if n.out[id] == nil && len(hb.Peers) < wire.MaxMembersPerMsg {
			hb.Peers = append(hb.Peers, wire.PeerInfo{NodeID: id, Addr: p.Addr})
		}
	}
	conns := n.outLocked()
	for i, c := range conns {
		conns[i] = n.heartbeatLinkLocked(c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.send(hb)
	}
	return hb.Seq
}

// outLocked lists the outbound control links.
func (n *Node) outLocked() []*conn {
	conns := make([]*conn, 0, len(n.out))
	for _, c := range n.out {
		conns = append(conns, c)
	}
	return conns
}
