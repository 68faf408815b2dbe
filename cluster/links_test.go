package cluster

import (
	"testing"
	"time"
)

func TestLinkStatEWMA(t *testing.T) {
	var l linkStat
	now := time.Now()
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	seq := uint64(0)
	feed := func(v float64) {
		seq++
		l.probeSent(seq)
		l.ack(seq, ms(v), 0, now)
	}
	// Warm-up: the first probes of a link are slow; the EWMA starts from
	// their minimum.
	for _, v := range []float64{30, 12, 10.5} {
		feed(v)
	}
	if l.rttEWMA != ms(10.5) {
		t.Fatalf("after warm-up EWMA = %v, want 10.5ms", l.rttEWMA)
	}
	for range 20 {
		feed(10)
	}
	if d := l.rttEWMA - ms(10); d < 0 || d > ms(0.01) {
		t.Fatalf("steady EWMA = %v, want ≈10ms", l.rttEWMA)
	}
	// A lone spike does not move the EWMA.
	feed(30)
	feed(10)
	if d := l.rttEWMA - ms(10); d < -ms(0.01) || d > ms(0.01) {
		t.Errorf("EWMA after a lone spike = %v, want ≈10ms", l.rttEWMA)
	}
	// A real step up (the link fell back to a slow path) is followed.
	for range 15 {
		feed(50)
	}
	if l.rttEWMA < ms(45) {
		t.Errorf("EWMA after 15 probes at 50ms = %v, want ≥ 45ms", l.rttEWMA)
	}
	if l.rttMin != ms(10) || l.rttLast != ms(50) || l.jitter <= 0 {
		t.Errorf("min %v last %v jitter %v", l.rttMin, l.rttLast, l.jitter)
	}
}

func TestLinkStatLossAndOffset(t *testing.T) {
	var l linkStat
	now := time.Now()
	for seq := uint64(1); seq <= 20; seq++ {
		l.probeSent(seq)
		if seq%4 != 0 { // every 4th probe lost
			l.ack(seq, time.Duration(seq)*time.Millisecond, time.Duration(seq)*time.Microsecond, now)
		}
	}
	loss, n := l.lossPct(20)
	// Probes 18..20 are still in flight (grace of 3); of 1..17, 4 are lost.
	if n != 17 || loss < 23.5 || loss > 23.6 {
		t.Errorf("loss = %.2f%% over %d probes, want 4/17 = 23.53%% over 17", loss, n)
	}
	off, unc := l.offset()
	// Of the last 8 acked probes (seqs 10,11,13,14,15,17,18,19), seq 10
	// had the smallest RTT: offset 10µs ± 5ms.
	if off != 10*time.Microsecond || unc != 5*time.Millisecond {
		t.Errorf("offset %v ± %v, want 10µs ± 5ms", off, unc)
	}
}
