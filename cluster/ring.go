package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// The ring benchmark passes a payload around every member over dedicated
// rank links (TLS, authenticated like the control links), so that each hop's
// latency and throughput can be seen: the link test exo users asked for.
//
// Each hop is timed by its sender, from the first byte written until the
// receiver's one-byte ack arrives: the transfer plus one one-way trip.

// ringTimeout bounds a whole benchmark run.
const ringTimeout = 60 * time.Second

// RingResult is what RingBench returns.
type RingResult struct {
	Bench  string    `json:"bench"`
	Order  []string  `json:"order"`
	Size   int       `json:"sizeBytes"`
	Rounds int       `json:"rounds"`
	Hops   []HopStat `json:"hops"`
	// RoundMs is the coordinator's time for the payload to go all round.
	RoundMs []float64 `json:"roundMs"`
	// Reports are every member's raw hop timings (its own clock), and
	// ClockOffsets each member's clock minus the coordinator's, from the
	// link probes, so that a trace can put all on one time line.
	Reports      []*wire.RingReport       `json:"-"`
	ClockOffsets map[string]time.Duration `json:"-"`
}

// HopStat summarises one hop over all rounds.
type HopStat struct {
	From           string  `json:"from"`
	To             string  `json:"to"`
	LatencyMsMin   float64 `json:"latencyMsMin"`
	LatencyMsAvg   float64 `json:"latencyMsAvg"`
	LatencyMsMax   float64 `json:"latencyMsMax"`
	ThroughputMBps float64 `json:"throughputMBps"` // size / average latency
}

// ringRun is one benchmark's state on one node. Guarded by Node.mu.
type ringRun struct {
	inbound chan *tls.Conn        // the rank link from our predecessor
	reports chan *wire.RingReport // coordinator only
}

func (n *Node) ringLocked(bench string) *ringRun {
	r := n.rings[bench]
	if r == nil {
		r = &ringRun{inbound: make(chan *tls.Conn, 1), reports: make(chan *wire.RingReport, wire.MaxMembersPerMsg)}
		n.rings[bench] = r
	}
	return r
}

// RingBench runs a ring benchmark over all current members, coordinated by
// this node: size bytes, rounds times around; traced unless noTrace. On an
// error after the run started, the result still names the run (Bench,
// Order), so that the caller can account for its trace.
func (n *Node) RingBench(ctx context.Context, size, rounds int, noTrace bool) (RingResult, error) {
	order := []string{n.cfg.NodeID}
	for _, m := range n.table.Alive() {
		if m.NodeID != n.cfg.NodeID {
			order = append(order, m.NodeID)
		}
	}
	start := &wire.RingStart{Bench: newBenchID(), Order: order, Size: size, Rounds: rounds, NoTrace: noTrace}
	if err := start.Validate(); err != nil {
		return RingResult{}, fmt.Errorf("ring bench: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ringTimeout)
	defer cancel()
	conns, err := n.waitLinks(ctx, order[1:])
	if err != nil {
		return RingResult{}, fmt.Errorf("ring bench: %w", err)
	}
	n.mu.Lock()
	run := n.ringLocked(start.Bench)
	n.mu.Unlock()
	defer func() { n.mu.Lock(); delete(n.rings, start.Bench); n.mu.Unlock() }()
	res := RingResult{Bench: start.Bench, Order: order, Size: size, Rounds: rounds}
	for id, c := range conns {
		if err := c.send(start); err != nil {
			return res, fmt.Errorf("ring bench: start %s: %w", id, err)
		}
	}
	rounds_, own, err := n.runRing(ctx, start, run)
	if err != nil {
		return res, err
	}
	reports := []*wire.RingReport{own}
	for len(reports) < len(order) {
		select {
		case r := <-run.reports:
			if r.Error != "" {
				return res, fmt.Errorf("ring bench: member %s: %s", r.From, r.Error)
			}
			reports = append(reports, r)
		case <-ctx.Done():
			return res, fmt.Errorf("ring bench: waiting for %d member reports: %w", len(order)-len(reports), ctx.Err())
		}
	}
	res.RoundMs, res.Reports, res.ClockOffsets = rounds_, reports, map[string]time.Duration{}
	for _, l := range n.Links() {
		res.ClockOffsets[l.PeerID] = l.ClockOffset
	}
	for _, r := range reports {
		res.Hops = append(res.Hops, hopStat(r, size))
	}
	sort.Slice(res.Hops, func(i, j int) bool {
		return slices.Index(order, res.Hops[i].From) < slices.Index(order, res.Hops[j].From)
	})
	return res, nil
}

func hopStat(r *wire.RingReport, size int) HopStat {
	h := HopStat{From: r.From, To: r.To}
	var sum float64
	for i, hop := range r.Hops {
		ms := float64(hop.LatencyNs) / 1e6
		if i == 0 || ms < h.LatencyMsMin {
			h.LatencyMsMin = ms
		}
		h.LatencyMsMax = max(h.LatencyMsMax, ms)
		sum += ms
	}
	if len(r.Hops) > 0 {
		h.LatencyMsAvg = sum / float64(len(r.Hops))
		h.ThroughputMBps = float64(size) / 1e6 / (h.LatencyMsAvg / 1e3)
	}
	return h
}

// onRingStart is a member's side: run, then report to the coordinator.
func (n *Node) onRingStart(c *conn, m *wire.RingStart) {
	if !slices.Contains(m.Order, n.cfg.NodeID) || m.Order[0] != c.peer {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ringTimeout)
		defer cancel()
		n.mu.Lock()
		run := n.ringLocked(m.Bench)
		n.mu.Unlock()
		defer func() { n.mu.Lock(); delete(n.rings, m.Bench); n.mu.Unlock() }()
		_, rep, err := n.runRing(ctx, m, run)
		if err != nil {
			rep = &wire.RingReport{Bench: m.Bench, From: n.cfg.NodeID, Error: err.Error()}
		}
		c.send(rep)
	}()
}

func (n *Node) onRingReport(m *wire.RingReport) {
	n.mu.Lock()
	run := n.rings[m.Bench]
	n.mu.Unlock()
	if run == nil {
		return
	}
	select {
	case run.reports <- m:
	default:
	}
}

// acceptRankLink hands an inbound rank link to its benchmark run.
func (n *Node) acceptRankLink(c *conn) {
	n.mu.Lock()
	run := n.ringLocked(c.hello.Bench)
	n.mu.Unlock()
	select {
	case run.inbound <- c.tc:
	default:
		c.tc.Close() // a second link for the same run
	}
}

// runRing is one rank's part, told to Config.RingRun (with the hops done so
// far when it fails).
func (n *Node) runRing(ctx context.Context, m *wire.RingStart, run *ringRun) ([]float64, *wire.RingReport, error) {
	var done func(*wire.RingReport, error)
	if n.cfg.RingRun != nil {
		done = n.cfg.RingRun(*m)
	}
	roundMs, rep, err := n.runRingRank(ctx, m, run)
	if done != nil {
		done(rep, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return roundMs, rep, nil
}

// runRingRank does the work of runRing. The coordinator (Order[0]) sends
// first and times whole rounds too; everyone else receives, acks, then
// sends on. The report it returns holds the hops done, on an error too.
func (n *Node) runRingRank(ctx context.Context, m *wire.RingStart, run *ringRun) ([]float64, *wire.RingReport, error) {
	i := slices.Index(m.Order, n.cfg.NodeID)
	succ := m.Order[(i+1)%len(m.Order)]
	pred := m.Order[(i+len(m.Order)-1)%len(m.Order)]
	out, err := n.dialRankLink(ctx, succ, m.Bench)
	if err != nil {
		return nil, nil, fmt.Errorf("ring bench: link to %s: %w", succ, err)
	}
	defer out.Close()
	var in *tls.Conn
	select {
	case in = <-run.inbound:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("ring bench: no link from %s: %w", pred, ctx.Err())
	}
	defer in.Close()
	stop := context.AfterFunc(ctx, func() { out.Close(); in.Close() })
	defer stop()
	toSucc, fromPred := n.trafficFor(succ), n.trafficFor(pred)

	payload := make([]byte, m.Size)
	rep := &wire.RingReport{Bench: m.Bench, From: n.cfg.NodeID, To: succ}
	var roundMs []float64
	for r := 0; r < m.Rounds; r++ {
		t0 := time.Now()
		var hop wire.RingHop
		if i != 0 {
			rs, re, err := recvPayload(in, payload, fromPred)
			if err != nil {
				return nil, rep, fmt.Errorf("ring bench: round %d from %s: %w", r, pred, err)
			}
			hop.RecvStartNs, hop.RecvEndNs = rs.UnixNano(), re.UnixNano()
		}
		ss := time.Now()
		lat, err := sendPayload(out, payload, toSucc)
		if err != nil {
			return nil, rep, fmt.Errorf("ring bench: round %d to %s: %w", r, succ, err)
		}
		hop.Round, hop.LatencyNs = r, lat.Nanoseconds()
		hop.SendStartNs, hop.AckNs = ss.UnixNano(), ss.Add(lat).UnixNano()
		if i == 0 {
			rs, re, err := recvPayload(in, payload, fromPred)
			if err != nil {
				return nil, rep, fmt.Errorf("ring bench: round %d back from %s: %w", r, pred, err)
			}
			hop.RecvStartNs, hop.RecvEndNs = rs.UnixNano(), re.UnixNano()
			roundMs = append(roundMs, float64(time.Since(t0))/1e6)
		}
		rep.Hops = append(rep.Hops, hop)
	}
	return roundMs, rep, nil
}

// sendPayload writes a length-prefixed payload and waits for the 1-byte ack.
func sendPayload(c net.Conn, p []byte, t *traffic) (time.Duration, error) {
	start := time.Now()
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(p)))
	if _, err := c.Write(hdr[:]); err != nil {
		return 0, err
	}
	if _, err := c.Write(p); err != nil {
		return 0, err
	}
	t.sent.Add(uint64(4 + len(p)))
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return 0, fmt.Errorf("ack: %w", err)
	}
	t.recv.Add(1)
	return time.Since(start), nil
}

// recvPayload reads one payload of exactly len(buf) bytes and acks it. It
// returns when the payload began to arrive (its header was read) and when
// it was complete.
func recvPayload(c net.Conn, buf []byte, t *traffic) (start, end time.Time, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return start, end, err
	}
	start = time.Now()
	if n := binary.BigEndian.Uint32(hdr[:]); int(n) != len(buf) {
		return start, end, fmt.Errorf("payload of %d bytes, want %d", n, len(buf))
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		return start, end, err
	}
	end = time.Now()
	t.recv.Add(uint64(4 + len(buf)))
	if _, err := c.Write([]byte{1}); err != nil {
		return start, end, err
	}
	t.sent.Add(1)
	return start, end, nil
}

// dialRankLink opens an authenticated rank link to peer for a benchmark.
func (n *Node) dialRankLink(ctx context.Context, peer, bench string) (*tls.Conn, error) {
	c, err := n.dialPurpose(ctx, peer, "ring", bench)
	if err != nil {
		return nil, err
	}
	return c.tc, nil
}

// linkWait bounds how long a ring run waits for control links to members
// that were heard from but not yet dialled (dials happen every heartbeat).
const linkWait = 3 * time.Second

// waitLinks returns our outbound link to each of ids, waiting a little for
// ones still being set up.
func (n *Node) waitLinks(ctx context.Context, ids []string) (map[string]*conn, error) {
	deadline := time.Now().Add(linkWait)
	for {
		n.mu.Lock()
		conns := map[string]*conn{}
		var missing string
		for _, id := range ids {
			if c := n.out[id]; c != nil {
				conns[id] = c
			} else {
				missing = id
			}
		}
		n.mu.Unlock()
		if missing == "" {
			return conns, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no link to member %s", missing)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func newBenchID() string {
	return fmt.Sprintf("ring-%d", time.Now().UnixNano())
}
