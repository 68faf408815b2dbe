package ringbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Each hop is timed by its sender, from the first byte written until the
// receiver's one-byte ack arrives: the transfer plus one one-way trip.

// runRank is one rank's part, told to Config.OnRank (with the hops done so
// far when it fails).
func (b *Bench) runRank(ctx context.Context, m *wire.RingStart, r *run) ([]float64, *wire.RingReport, error) {
	var done func(*wire.RingReport, error)
	if b.cfg.OnRank != nil {
		done = b.cfg.OnRank(*m)
	}
	roundMs, rep, err := b.hops(ctx, m, r)
	if done != nil {
		done(rep, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return roundMs, rep, nil
}

// hops does the work of runRank. The coordinator (Order[0]) sends first
// and times whole rounds too; everyone else receives, acks, then sends on.
// The report it returns holds the hops done, on an error too.
func (b *Bench) hops(ctx context.Context, m *wire.RingStart, r *run) ([]float64, *wire.RingReport, error) {
	self := b.cfg.Node.ID()
	i := slices.Index(m.Order, self)
	succ := m.Order[(i+1)%len(m.Order)]
	pred := m.Order[(i+len(m.Order)-1)%len(m.Order)]
	rep := &wire.RingReport{Bench: m.Bench, From: self, To: succ}
	out, err := b.cfg.Node.DialStream(ctx, succ, PurposeLink, m.Bench)
	if err != nil {
		return nil, rep, fmt.Errorf("ring bench: link to %s: %w", succ, err)
	}
	defer out.Close()
	var in net.Conn
	select {
	case in = <-r.inbound:
	case <-ctx.Done():
		return nil, rep, fmt.Errorf("ring bench: no link from %s: %w", pred, ctx.Err())
	}
	defer in.Close()
	stop := context.AfterFunc(ctx, func() { out.Close(); in.Close() })
	defer stop()

	payload := make([]byte, m.Size)
	var roundMs []float64
	for round := 0; round < m.Rounds; round++ {
		t0 := time.Now()
		hop := wire.RingHop{Round: round}
		if i != 0 {
			if err := recvHop(in, payload, &hop); err != nil {
				return nil, rep, fmt.Errorf("ring bench: round %d from %s: %w", round, pred, err)
			}
		}
		ss := time.Now()
		lat, err := sendPayload(out, payload)
		if err != nil {
			return nil, rep, fmt.Errorf("ring bench: round %d to %s: %w", round, succ, err)
		}
		hop.LatencyNs, hop.SendStartNs, hop.AckNs = lat.Nanoseconds(), ss.UnixNano(), ss.Add(lat).UnixNano()
		if i == 0 {
			if err := recvHop(in, payload, &hop); err != nil {
				return nil, rep, fmt.Errorf("ring bench: round %d back from %s: %w", round, pred, err)
			}
			roundMs = append(roundMs, float64(time.Since(t0))/1e6)
		}
		rep.Hops = append(rep.Hops, hop)
	}
	return roundMs, rep, nil
}

func recvHop(in net.Conn, payload []byte, hop *wire.RingHop) error {
	rs, re, err := recvPayload(in, payload)
	if err != nil {
		return err
	}
	hop.RecvStartNs, hop.RecvEndNs = rs.UnixNano(), re.UnixNano()
	return nil
}

// sendPayload writes a length-prefixed payload and waits for the 1-byte ack.
func sendPayload(c net.Conn, p []byte) (time.Duration, error) {
	start := time.Now()
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(p)))
	if _, err := c.Write(hdr[:]); err != nil {
		return 0, err
	}
	if _, err := c.Write(p); err != nil {
		return 0, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return 0, fmt.Errorf("ack: %w", err)
	}
	return time.Since(start), nil
}

// recvPayload reads one payload of exactly len(buf) bytes and acks it. It
// returns when the payload began to arrive (its header was read) and when
// it was complete.
func recvPayload(c net.Conn, buf []byte) (start, end time.Time, err error) {
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
	if _, err := c.Write([]byte{1}); err != nil {
		return start, end, err
	}
	return start, end, nil
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

// writeMsg writes one control message as a wire frame.
func writeMsg(ctx context.Context, c net.Conn, msg wire.Message) error {
	typ, b, err := wire.Encode(msg)
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		c.SetWriteDeadline(d)
	}
	return wire.WriteFrame(c, typ, b)
}

// readMsg reads one control message (a RingStart or a RingReport) of at
// most maxMsg bytes, until ctx ends.
func readMsg(ctx context.Context, c net.Conn) (wire.Message, error) {
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	typ, payload, err := wire.ReadFrame(c, maxMsg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if typ != wire.TypeRingStart && typ != wire.TypeRingReport {
		return nil, fmt.Errorf("%s on a ring control stream", typ)
	}
	return wire.Decode(typ, payload)
}

// readReport reads a member's report.
func readReport(ctx context.Context, c net.Conn) (*wire.RingReport, error) {
	msg, err := readMsg(ctx, c)
	if err != nil {
		return nil, err
	}
	rep, ok := msg.(*wire.RingReport)
	if !ok {
		return nil, fmt.Errorf("got %T, want a report", msg)
	}
	return rep, nil
}
