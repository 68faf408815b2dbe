package ringbench

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/wire"
)

// FuzzReadMsg feeds arbitrary bytes to the control stream's reader: it
// fails cleanly or returns a valid RingStart or RingReport, which survives
// a write → read round trip.
func FuzzReadMsg(f *testing.F) {
	for _, seed := range clustertest.Frames(f,
		&wire.RingStart{Bench: "r1", Order: []string{"a", "b"}, Size: 10, Rounds: 1},
		&wire.RingReport{Bench: "r1", From: "a", To: "b", Hops: []wire.RingHop{{Round: 0, LatencyNs: 5}}},
		&wire.Fetch{Since: 1},
	) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := feed(data)
		msg, err := readMsg(context.Background(), c)
		c.Close() // ends the feeding goroutine, which may have bytes left
		if err != nil {
			return
		}
		switch msg.(type) {
		case *wire.RingStart, *wire.RingReport:
		default:
			t.Fatalf("read a %T", msg)
		}
		a, b := net.Pipe()
		defer a.Close()
		go func() { writeMsg(context.Background(), a, msg) }()
		back, err := readMsg(context.Background(), b)
		if err != nil {
			t.Fatalf("re-read %T: %v", msg, err)
		}
		_, x, _ := wire.Encode(msg)
		_, y, _ := wire.Encode(back)
		if !bytes.Equal(x, y) {
			t.Fatalf("round trip changed %s into %s", x, y)
		}
	})
}

// feed returns a conn that reads data, then EOF.
func feed(data []byte) net.Conn {
	a, b := net.Pipe()
	go func() {
		a.Write(data)
		a.Close()
	}()
	return b
}
