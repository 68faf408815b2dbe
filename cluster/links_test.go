package cluster

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestLinkStatEWMA(t *testing.T) {
	var l linkStat
	now := time.Now()
	beat := uint64(0)
	// feed sends one burst whose echoes took the given RTTs.
	feed := func(rtts ...float64) {
		beat++
		for len(rtts) < ProbesPerBurst { // a full burst: repeat the slowest
			rtts = append(rtts, rtts[len(rtts)-1]+5)
		}
		for i, v := range rtts {
			seq := beat*ProbesPerBurst + uint64(i)
			l.probeSent(seq)
			l.ack(seq, ms(v), 0, now)
		}
	}
	// The fastest probe of a burst is its sample: scheduling noise only
	// ever adds time.
	feed(12, 30, 10.5)
	if l.rttLast != ms(10.5) || l.samples != 1 {
		t.Fatalf("burst sample = %v (%d samples), want 10.5ms", l.rttLast, l.samples)
	}
	// Warm-up: the EWMA starts from the best of the first samples.
	feed(30, 31, 32)
	feed(11, 12, 13)
	if l.rttEWMA != ms(10.5) {
		t.Fatalf("after warm-up EWMA = %v, want 10.5ms", l.rttEWMA)
	}
	for range 20 {
		feed(10, 11, 14)
	}
	if d := l.rttEWMA - ms(10); d < 0 || d > ms(0.01) {
		t.Fatalf("steady EWMA = %v, want ≈10ms", l.rttEWMA)
	}
	// A lone spike does not move the EWMA.
	feed(30, 31, 30)
	feed(10, 10, 10)
	if d := l.rttEWMA - ms(10); d < -ms(0.01) || d > ms(0.01) {
		t.Errorf("EWMA after a lone spike = %v, want ≈10ms", l.rttEWMA)
	}
	// A real step up (the link fell back to a slow path) is followed.
	for range 15 {
		feed(50, 51, 52)
	}
	if l.rttEWMA < ms(45) {
		t.Errorf("EWMA after 15 samples at 50ms = %v, want ≥ 45ms", l.rttEWMA)
	}
	if l.rttMin != ms(10) || l.rttLast != ms(50) || l.jitter <= 0 {
		t.Errorf("min %v last %v jitter %v", l.rttMin, l.rttLast, l.jitter)
	}
	// A burst that lost an echo still yields its sample when the next
	// burst starts; a late echo of a counted burst changes nothing.
	n := l.samples
	beat++
	for i := range ProbesPerBurst - 1 { // one echo of this burst never comes
		seq := beat*ProbesPerBurst + uint64(i)
		l.probeSent(seq)
		l.ack(seq, ms(50), 0, now)
	}
	feed(50, 50, 50)
	if l.samples != n+2 {
		t.Errorf("samples %d, want %d: the incomplete burst was not counted", l.samples, n+2)
	}
	l.ack(beat*ProbesPerBurst, ms(1), 0, now)
	if l.samples != n+2 || l.rttMin != ms(10) {
		t.Error("a late echo of a counted burst was folded in")
	}
}

func TestLinkStatLossAndOffset(t *testing.T) {
	var l linkStat
	now := time.Now()
	for seq := uint64(3); seq < 3+20; seq++ {
		l.probeSent(seq)
		if seq%4 != 0 { // 4, 8, 12, 16, 20 lost
			l.ack(seq, time.Duration(seq)*time.Millisecond, time.Duration(seq)*time.Microsecond, now)
		}
	}
	// Current probe seq 23: probes ≥ 23−lossGrace are still in flight.
	loss, n := l.lossPct(23)
	inFlight := uint64(23 - lossGrace)
	var sent, lost int
	for seq := uint64(3); seq < 23; seq++ {
		if seq <= inFlight {
			sent++
			if seq%4 == 0 {
				lost++
			}
		}
	}
	want := 100 * float64(lost) / float64(sent)
	if n != sent || loss < want-0.01 || loss > want+0.01 {
		t.Errorf("loss = %.2f%% over %d probes, want %.2f%% over %d", loss, n, want, sent)
	}
	// Forgotten probes (their link went down) are not loss.
	l.forgetUnacked()
	if loss, _ := l.lossPct(23); loss != 0 {
		t.Errorf("loss after forgetting unacked probes = %.2f%%", loss)
	}
	off, unc := l.offset()
	// Of the last 8 echoes (seqs 13,14,15,17,18,19,21,22), seq 13 had the
	// smallest RTT: offset 13µs ± 6.5ms.
	if off != 13*time.Microsecond || unc != ms(6.5) {
		t.Errorf("offset %v ± %v, want 13µs ± 6.5ms", off, unc)
	}
}

// A peer is listed, with its byte counters, from its control link on:
// before its first probe has come back (a shard can cross the link in
// that time), and without measurements until one has.
func TestLinksListedBeforeFirstProbe(t *testing.T) {
	n := &Node{out: map[string]*conn{}, links: map[string]*linkStat{}, traffic: map[string]*traffic{}}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &conn{tc: tls.Client(a, &tls.Config{}), peer: "p1", traffic: n.trafficFor("p1")}
	n.out["p1"] = c
	c.traffic.recv.Add(11_700_000)
	c.traffic.sent.Add(300)
	ls := n.Links()
	if len(ls) != 1 || ls[0].PeerID != "p1" || ls[0].BytesRecv != 11_700_000 || ls[0].BytesSent != 300 || ls[0].Samples != 0 || ls[0].RTTEWMA != 0 {
		t.Fatalf("links before the first probe = %+v, want p1 with its counters and no samples", ls)
	}
	// Probes sent but no burst complete: still no samples.
	n.linkLocked("p1").probeSent(5)
	if ls := n.Links(); len(ls) != 1 || ls[0].Samples != 0 {
		t.Fatalf("links = %+v", ls)
	}
	// A gone peer's stats without a link or a sample are not listed.
	n.linkLocked("gone")
	if ls := n.Links(); len(ls) != 1 {
		t.Fatalf("links = %+v, want only p1", ls)
	}
}
