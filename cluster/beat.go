package cluster

import (
	"context"
	"sync"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Heartbeat links: each node sends its heartbeats to a peer over a TLS link
// of their own ("beat" purpose), dialled next to the control link, and the
// peer answers each with its ProbeAck on it. The control link carries the
// events: a member that submits more than the master's submit bucket lets
// through is paced there, by TCP, and its heartbeats would wait behind its
// backlog (seconds; 8 s in TestSubmitFloodKeepsHeartbeats before this
// link). Until the beat link is up, heartbeats go on the control link.

// purposeBeat is the node's own heartbeat link.
const purposeBeat Purpose = "beat"

// ensureBeatLinks dials a beat link to every peer we have a control link to
// and no beat link yet.
func (n *Node) ensureBeatLinks(ctx context.Context, wg *sync.WaitGroup) {
	n.ensureLinks(wg, func(id string) bool { return n.beats[id] != nil }, n.beatDialing,
		func(id string) { n.runBeatLink(ctx, wg, id) })
}

// runBeatLink dials the beat link to peer and serves it (the acks of our
// heartbeats) until it fails.
func (n *Node) runBeatLink(ctx context.Context, wg *sync.WaitGroup, peer string) {
	n.mu.Lock()
	c := n.out[peer]
	n.mu.Unlock()
	if c == nil {
		return
	}
	bc, err := n.dialTLS(ctx, c.addr, purposeBeat, "")
	if err != nil {
		return
	}
	if bc.peer != peer {
		bc.tc.Close()
		return
	}
	n.mu.Lock()
	n.beats[peer] = bc
	n.mu.Unlock()
	n.serveConn(ctx, wg, bc, func() {
		n.mu.Lock()
		if n.beats[peer] == bc {
			delete(n.beats, peer)
		}
		n.mu.Unlock()
	})
}

// keepControlLinks sends a keepalive (a ProbeAck, which only says "alive")
// on every control link, both ways, each heartbeat: with the heartbeats on
// the beat links, a control link may otherwise carry nothing for longer
// than its read deadline (FailAfter plus a heartbeat), and be closed for
// it.
func (n *Node) keepControlLinks() {
	n.mu.Lock()
	conns := n.outLocked()
	for c := range n.in {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	ka := &wire.ProbeAck{NodeID: n.cfg.NodeID}
	for _, c := range conns {
		c.send(ka)
	}
}

// heartbeatLink is where heartbeats to the peer of control link c go: its
// beat link when there is one. Called with n.mu held.
func (n *Node) heartbeatLinkLocked(c *conn) *conn {
	if b := n.beats[c.peer]; b != nil {
		return b
	}
	return c
}
