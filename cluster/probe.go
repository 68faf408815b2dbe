package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"sync"
	"time"
)

// Link probes run on a dedicated TLS link per peer ("probe" purpose), apart
// from the control link: the far end echoes each probe from a tight loop,
// with no queue, no JSON and no event work in the way, so that what is
// measured is the network and not the agents' own processing.
//
// Probe: seq, t1 (16 bytes). Echo: seq, t1, t2 (read), t3 (written): 32
// bytes. Times are Unix ns of the clock of the node that stamps them.

const (
	probeLen     = 16
	echoLen      = 32
	probeTimeout = 200 * time.Millisecond // a probe write that blocks this long is dropped
)

// probeLink is our outbound probe link to one peer. Guarded by Node.mu.
type probeLink struct {
	tc   *tls.Conn
	peer string
	mu   sync.Mutex // serialises writes
}

// echoProbes is the far end: answer every probe until the link fails or
// ctx (the node's) ends. The prober sends every heartbeat, so the read
// never idles out on its own: without ctx a stopping node would wait
// until its peers swept it.
func (n *Node) echoProbes(ctx context.Context, c *conn) {
	stop := context.AfterFunc(ctx, func() { c.tc.Close() })
	defer stop()
	defer c.tc.Close()
	t := c.traffic
	var in [probeLen]byte
	var out [echoLen]byte
	for {
		c.tc.SetReadDeadline(time.Now().Add(n.cfg.FailAfter + n.cfg.Heartbeat))
		if _, err := io.ReadFull(c.tc, in[:]); err != nil {
			return
		}
		t2 := n.cfg.Clock().UnixNano()
		copy(out[:probeLen], in[:])
		binary.BigEndian.PutUint64(out[16:], uint64(t2))
		binary.BigEndian.PutUint64(out[24:], uint64(n.cfg.Clock().UnixNano()))
		c.tc.SetWriteDeadline(time.Now().Add(probeTimeout))
		if _, err := c.tc.Write(out[:]); err != nil {
			return
		}
		t.recv.Add(probeLen)
		t.sent.Add(echoLen)
	}
}

// ensureProbeLinks dials a probe link to every peer we have a control link
// to and no probe link yet.
func (n *Node) ensureProbeLinks(ctx context.Context, wg *sync.WaitGroup) {
	n.ensureLinks(wg, func(id string) bool { return n.probes[id] != nil }, n.probeDialing,
		func(id string) { n.runProbeLink(ctx, id) })
}

// ensureLinks runs run, on a goroutine of wg, for every peer we have a
// control link to and no link of a kind yet (has, called with n.mu held),
// noting it in dialing (guarded by n.mu) meanwhile.
func (n *Node) ensureLinks(wg *sync.WaitGroup, has func(id string) bool, dialing map[string]bool, run func(id string)) {
	n.mu.Lock()
	var want []string
	for id, c := range n.out {
		if !has(id) && !dialing[id] && c.addr != "" {
			dialing[id] = true
			want = append(want, id)
		}
	}
	n.mu.Unlock()
	for _, id := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { n.mu.Lock(); delete(dialing, id); n.mu.Unlock() }()
			run(id)
		}()
	}
}

// runProbeLink dials the probe link to peer and reads echoes until it fails.
func (n *Node) runProbeLink(ctx context.Context, peer string) {
	n.mu.Lock()
	c := n.out[peer]
	n.mu.Unlock()
	if c == nil {
		return
	}
	pc, err := n.dialTLS(ctx, c.addr, purposeProbe, "")
	if err != nil {
		return
	}
	tc := pc.tc
	if pc.peer != peer {
		tc.Close()
		return
	}
	pl := &probeLink{tc: tc, peer: peer}
	n.mu.Lock()
	n.probes[peer] = pl
	beat := max(n.seq, 1) // probe seqs start at 1 (0 marks an empty slot)
	n.mu.Unlock()
	// A first burst at once, so that a new peer has its RTT, clock offset
	// and telemetry edge within milliseconds, not a heartbeat or two
	// later. It counts as the current heartbeat's burst (where that one
	// also reaches the peer, its echoes come late and are dropped).
	go func() {
		for i := uint64(0); i < ProbesPerBurst; i++ {
			if i > 0 {
				time.Sleep(burstSpacing)
			}
			n.sendProbe(pl, beat*ProbesPerBurst+i)
		}
	}()
	stop := context.AfterFunc(ctx, func() { tc.Close() })
	defer func() {
		stop()
		tc.Close()
		n.mu.Lock()
		if n.probes[peer] == pl {
			delete(n.probes, peer)
		}
		if l := n.links[peer]; l != nil {
			l.forgetUnacked()
		}
		n.mu.Unlock()
	}()
	t := pc.traffic
	var buf [echoLen]byte
	for {
		tc.SetReadDeadline(time.Now().Add(n.cfg.FailAfter + n.cfg.Heartbeat))
		if _, err := io.ReadFull(tc, buf[:]); err != nil {
			return
		}
		t4 := n.cfg.Clock()
		t.recv.Add(echoLen)
		seq := binary.BigEndian.Uint64(buf[0:])
		t1 := int64(binary.BigEndian.Uint64(buf[8:]))
		t2 := int64(binary.BigEndian.Uint64(buf[16:]))
		t3 := int64(binary.BigEndian.Uint64(buf[24:]))
		rtt := time.Duration((t4.UnixNano() - t1) - (t3 - t2))
		off := time.Duration(((t2 - t1) + (t3 - t4.UnixNano())) / 2)
		n.mu.Lock()
		n.linkLocked(peer).ack(seq, rtt, off, t4)
		n.mu.Unlock()
	}
}

// sendProbes writes a burst of ProbesPerBurst probes on every probe link,
// burstSpacing apart (the caller's goroutine sleeps in between).
func (n *Node) sendProbes(beat uint64) {
	n.mu.Lock()
	links := make([]*probeLink, 0, len(n.probes))
	for _, pl := range n.probes {
		links = append(links, pl)
	}
	n.mu.Unlock()
	if len(links) == 0 {
		return
	}
	for i := uint64(0); i < ProbesPerBurst; i++ {
		if i > 0 {
			time.Sleep(burstSpacing)
		}
		for _, pl := range links {
			n.sendProbe(pl, beat*ProbesPerBurst+i)
		}
	}
}

func (n *Node) sendProbe(pl *probeLink, seq uint64) {
	var b [probeLen]byte
	binary.BigEndian.PutUint64(b[0:], seq)
	// Record the probe before writing it: on a fast link the echo can be
	// read before Write returns.
	n.mu.Lock()
	n.linkLocked(pl.peer).probeSent(seq)
	n.mu.Unlock()
	pl.mu.Lock()
	binary.BigEndian.PutUint64(b[8:], uint64(n.cfg.Clock().UnixNano()))
	pl.tc.SetWriteDeadline(time.Now().Add(probeTimeout))
	_, err := pl.tc.Write(b[:])
	pl.mu.Unlock()
	if err != nil {
		// A timed-out TLS write leaves the link unusable: drop it (its
		// unacked probes are forgotten); the next heartbeat dials anew.
		closeTLS(pl.tc)
		return
	}
	n.mu.Lock()
	if t := n.traffic[pl.peer]; t != nil {
		t.sent.Add(probeLen)
	}
	n.mu.Unlock()
}
