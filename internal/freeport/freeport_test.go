package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestParseLow(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"32768\t60999\n", 32768, true},
		{"49152 65535", 49152, true},
		{"1024\t65535\n", 0, false}, // no room below
		{"", 0, false},
		{"x 60999", 0, false},
		{"70000 80000", 0, false},
	} {
		got, err := parseLow(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseLow(%q) = %d, %v; want %d (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

// Ranges lie below the ephemeral range, are free on every host asked for,
// and never overlap within a process.
func TestRange(t *testing.T) {
	low := EphemeralLow()
	seen := map[int]bool{}
	for _, n := range []int{1, 3, 4, 1, 8} {
		first, err := Range(n, "127.0.0.1", "127.0.0.6")
		if err != nil {
			t.Fatal(err)
		}
		if first < minPort || first+n-1 >= low {
			t.Fatalf("Range(%d) = %d: outside %d..%d", n, first, minPort, low-1)
		}
		for port := first; port < first+n; port++ {
			if seen[port] {
				t.Fatalf("port %d handed out twice", port)
			}
			seen[port] = true
			for _, h := range []string{"127.0.0.1", "127.0.0.6"} {
				ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
				if err != nil {
					t.Fatalf("port %d of Range(%d) on %s: %v", port, n, h, err)
				}
				ln.Close()
			}
		}
	}
	addrs, err := Addrs(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		_, ps, err := net.SplitHostPort(a)
		port, _ := strconv.Atoi(ps)
		if err != nil || port >= low || seen[port] {
			t.Fatalf("Addrs gave %s (%v): want a port below %d not handed out before", a, err, low)
		}
		seen[port] = true
	}
}

// A busy port is passed over.
func TestRangeSkipsBusy(t *testing.T) {
	p := New(0)
	p.next.Store(0) // the first candidate is low-1
	busy := p.low - 1
	// Held here; or, if that fails, held by someone else: busy either way.
	if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(busy))); err == nil {
		defer ln.Close()
	}
	got, err := p.Range(1)
	if err != nil {
		t.Fatal(err)
	}
	if got == busy || got >= p.low {
		t.Fatalf("Range(1) = %d with %d busy, below %d", got, busy, p.low)
	}
}

func TestNoRoom(t *testing.T) {
	if _, err := New(minPort + 2).Range(3); err == nil {
		t.Fatal("3 ports between 1024 and 1026: no error")
	}
	if _, err := New(0).Range(0); err == nil {
		t.Fatal("Range(0): no error")
	}
}
