package cluster

import (
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Link telemetry constants.
const (
	// RTTAlpha is the EWMA weight of a new RTT sample: 0.2 settles within
	// ~10 probes (10 s at the default heartbeat). A lone spike is held
	// back one probe and dropped unless the next probe confirms it.
	RTTAlpha = 0.2
	// JitterAlpha weighs |RTT − previous RTT| into the jitter EWMA, as
	// RFC 3550 does with 1/16, but faster to follow a changing link.
	JitterAlpha = 0.125
	// lossWindow probes (20 heartbeats) are kept to compute loss; a probe
	// counts as lost once it is 3 heartbeats old without an ack.
	lossWindow = 20 * ProbesPerBurst
	lossGrace  = 3 * ProbesPerBurst
	// offsetWindow recent samples are kept; the clock offset is taken from
	// the one with the smallest RTT, whose path asymmetry bounds the error.
	offsetWindow = 8
)

// Link is this node's measurement of its link to one peer.
type Link struct {
	PeerID string `json:"peerId"`
	// LocalAddr and RemoteAddr are the outbound connection's endpoints.
	LocalAddr  string `json:"localAddr"`
	RemoteAddr string `json:"remoteAddr"`
	// RTT figures in nanoseconds; RTTEWMA is smoothed with RTTAlpha.
	RTTLast time.Duration `json:"rttLastNs"`
	RTTEWMA time.Duration `json:"rttEwmaNs"`
	RTTMin  time.Duration `json:"rttMinNs"`
	Jitter  time.Duration `json:"jitterNs"`
	LossPct float64       `json:"lossPct"`
	Probes  int           `json:"probes"`
	// Samples counts the RTT samples taken (one per burst of probes); the
	// RTT, jitter and clock-offset fields mean nothing while it is 0. A
	// peer is listed from its control link on, so that its byte counters
	// can be read before its first probe comes back.
	Samples int `json:"samples"`
	// ClockOffset is the peer's clock minus ours (NTP-style, from the
	// minimum-RTT recent probe); its uncertainty is that probe's RTT/2.
	ClockOffset            time.Duration `json:"clockOffsetNs"`
	ClockOffsetUncertainty time.Duration `json:"clockOffsetUncertaintyNs"`
	// BytesSent and BytesRecv count Orrery's own traffic with this peer,
	// over every link to it, since this node started.
	BytesSent uint64    `json:"bytesSent"`
	BytesRecv uint64    `json:"bytesRecv"`
	LastAck   time.Time `json:"lastAck"`
}

// traffic counts bytes exchanged with one peer; shared by its links.
type traffic struct {
	sent, recv atomic.Uint64
}

type offsetSample struct {
	rtt, offset time.Duration
}

// linkStat accumulates probes to one peer. Guarded by Node.mu.
type linkStat struct {
	rttLast, rttEWMA, rttMin, jitter time.Duration
	samples                          int
	sent                             [lossWindow]uint64 // probe seqs sent, ring
	acked                            [lossWindow]bool
	nSent                            int
	offsets                          [offsetWindow]offsetSample
	nOffsets                         int
	lastAck                          time.Time
	spikePending                     bool
	spikeRTT                         time.Duration
	// The burst being collected, its fastest echo so far, how many of its
	// echoes came, and the last burst already folded in.
	burst, burstDone uint64
	burstMin         time.Duration
	burstN           int
}

// ProbesPerBurst probes are sent each heartbeat, 2 ms apart; the fastest
// echo is that heartbeat's RTT sample. Probe seq = heartbeat seq ×
// ProbesPerBurst + i.
const (
	ProbesPerBurst = 5
	burstSpacing   = 2 * time.Millisecond
)

// warmupProbes are the first probes of a link, whose minimum seeds the
// EWMA. A spike is a sample over twice the EWMA and 1 ms above it.
const warmupProbes = 3

func spike(rtt, ewma time.Duration) bool {
	return rtt > 2*ewma && rtt-ewma > time.Millisecond
}

func (l *linkStat) probeSent(seq uint64) {
	i := l.nSent % lossWindow
	l.sent[i], l.acked[i] = seq, false
	l.nSent++
}

func (l *linkStat) ack(seq uint64, rtt, offset time.Duration, now time.Time) {
	for i := range l.sent {
		if l.sent[i] == seq && i < l.nSent {
			l.acked[i] = true
		}
	}
	if rtt < 0 {
		rtt = 0 // clocks are monotonic within a node; be safe anyway
	}
	l.offsets[l.nOffsets%offsetWindow] = offsetSample{rtt, offset}
	l.nOffsets++
	l.lastAck = now
	// One RTT sample per burst: the fastest of its probes. Scheduling
	// delays on either end only ever add time, so the minimum of a few
	// probes is the network's RTT (NTP's clock filter does the same).
	burst := seq / ProbesPerBurst
	if burst <= l.burstDone {
		return // a late echo of a burst already counted
	}
	if burst != l.burst && l.burstN > 0 {
		l.sample(l.burstMin)
		l.burstDone = l.burst
	}
	if burst != l.burst || l.burstN == 0 {
		l.burst, l.burstN, l.burstMin = burst, 0, rtt
	}
	l.burstMin = min(l.burstMin, rtt)
	l.burstN++
	if l.burstN == ProbesPerBurst {
		l.sample(l.burstMin)
		l.burstDone, l.burstN = burst, 0
	}
}

// sample folds one RTT sample into the EWMA, min and jitter.
func (l *linkStat) sample(rtt time.Duration) {
	switch {
	case l.samples == 0:
		l.rttEWMA, l.rttMin = rtt, rtt
	case l.samples < warmupProbes:
		// The first samples of a new link pay for its setup (TLS, slow
		// start): start the average from the best of them.
		l.rttMin = min(l.rttMin, rtt)
		l.rttEWMA = l.rttMin
	default:
		l.rttMin = min(l.rttMin, rtt)
		if spike(rtt, l.rttEWMA) && !l.spikePending {
			// A lone spike (a GC pause, a burst on the link) is held back;
			// if the next sample is high too, both count.
			l.spikePending, l.spikeRTT = true, rtt
			break
		}
		if l.spikePending {
			if spike(rtt, l.rttEWMA) { // confirmed: the link really is slower
				l.rttEWMA += time.Duration(RTTAlpha * float64(l.spikeRTT-l.rttEWMA))
			}
			l.spikePending = false
		}
		l.rttEWMA += time.Duration(RTTAlpha * float64(rtt-l.rttEWMA))
	}
	if l.samples > 0 {
		d := rtt - l.rttLast
		l.jitter += time.Duration(JitterAlpha * (math.Abs(float64(d)) - float64(l.jitter)))
	}
	l.rttLast = rtt
	l.samples++
}

// forgetUnacked drops probes still waiting for an ack when their link went
// down: our own reconnect is not loss on the network.
func (l *linkStat) forgetUnacked() {
	for i := range l.sent {
		if !l.acked[i] {
			l.sent[i] = 0
		}
	}
}

// lossPct counts probes sent at least lossGrace probes ago and not acked.
// Sequence numbers start at 1; 0 marks an empty or forgotten slot.
func (l *linkStat) lossPct(curSeq uint64) (float64, int) {
	var sent, lost int
	n := min(l.nSent, lossWindow)
	for i := 0; i < n; i++ {
		if l.sent[i] == 0 || l.sent[i]+lossGrace > curSeq {
			continue // empty, forgotten, or may still be in flight
		}
		sent++
		if !l.acked[i] {
			lost++
		}
	}
	if sent == 0 {
		return 0, 0
	}
	return 100 * float64(lost) / float64(sent), sent
}

func (l *linkStat) offset() (off, uncertainty time.Duration) {
	n := min(l.nOffsets, offsetWindow)
	best := -1
	for i := 0; i < n; i++ {
		if best < 0 || l.offsets[i].rtt < l.offsets[best].rtt {
			best = i
		}
	}
	if best < 0 {
		return 0, 0
	}
	return l.offsets[best].offset, l.offsets[best].rtt / 2
}

// linkLocked returns the probe statistics of peer, creating them.
func (n *Node) linkLocked(peer string) *linkStat {
	l := n.links[peer]
	if l == nil {
		l = &linkStat{}
		n.links[peer] = l
	}
	return l
}

// trafficFor returns the byte counters of peer, shared by all its links.
func (n *Node) trafficFor(peer string) *traffic {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.traffic[peer]
	if t == nil {
		if len(n.traffic) >= 4*wire.MaxMembersPerMsg {
			clear(n.traffic) // bound: peers come and go over weeks
		}
		t = &traffic{}
		n.traffic[peer] = t
	}
	return t
}

// Links returns the link to every peer we have a control link to or have
// probed, sorted by peer: its byte counters, and its measurements once
// Samples > 0.
func (n *Node) Links() []Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.linksLocked()
}

func (n *Node) linksLocked() []Link {
	out := []Link{}
	ids := map[string]bool{}
	for id, l := range n.links {
		ids[id] = l.samples > 0
	}
	for id := range n.out {
		ids[id] = true
	}
	for id, listed := range ids {
		if !listed {
			continue
		}
		l := n.links[id]
		if l == nil {
			l = &linkStat{}
		}
		loss, probes := l.lossPct((n.seq + 1) * ProbesPerBurst)
		off, unc := l.offset()
		lk := Link{PeerID: id, RTTLast: l.rttLast, RTTEWMA: l.rttEWMA, RTTMin: l.rttMin, Jitter: l.jitter,
			LossPct: loss, Probes: probes, Samples: l.samples, ClockOffset: off, ClockOffsetUncertainty: unc, LastAck: l.lastAck}
		if c := n.out[id]; c != nil {
			lk.LocalAddr, lk.RemoteAddr = c.tc.LocalAddr().String(), c.tc.RemoteAddr().String()
		}
		if t := n.traffic[id]; t != nil {
			lk.BytesSent, lk.BytesRecv = t.sent.Load(), t.recv.Load()
		}
		out = append(out, lk)
	}
	slices.SortFunc(out, func(a, b Link) int { return strings.Compare(a.PeerID, b.PeerID) })
	return out
}

// BytesSent returns the bytes sent so far to each peer over all links, for
// every peer ever linked (Links lists only those linked or probed now).
func (n *Node) BytesSent() map[string]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]uint64, len(n.traffic))
	for id, t := range n.traffic {
		out[id] = t.sent.Load()
	}
	return out
}
