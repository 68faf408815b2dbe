package delayproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// echoServer echoes each connection until EOF, then closes it.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln
}

func startProxy(t *testing.T, delay time.Duration, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := New(ln, delay, func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", upstream)
	})
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

func TestDelayProxyDelaysEachWay(t *testing.T) {
	const delay = 20 * time.Millisecond
	p := startProxy(t, delay, echoServer(t).Addr().String())
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := []byte("ping")
	for i := range 3 {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		rtt := time.Since(start)
		// The lower bound holds by construction; the upper one is loose
		// for busy machines.
		if rtt < 2*delay || rtt > 2*delay+time.Second || !bytes.Equal(got, msg) {
			t.Errorf("round trip %d: %q after %v, want %q after 2×%v", i, got, rtt, msg, delay)
		}
	}
	if n, _, _ := p.Lateness(); n != 6 {
		t.Errorf("%d chunks forwarded, want 6", n)
	}
}

// The delay adds latency, not a rate limit, and half-closes propagate.
func TestDelayProxyThroughputAndHalfClose(t *testing.T) {
	const delay = 50 * time.Millisecond
	p := startProxy(t, delay, echoServer(t).Addr().String())
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	data := make([]byte, 8<<20)
	rand.Read(data)
	start := time.Now()
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c) // EOF: the echo server saw ours and closed
	if err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echoed %d bytes, not the %d sent", len(got), len(data))
	}
	// 8 MiB in chunks of ≤ 32 KiB is ≥ 256 chunks each way: ≥ 12.8 s if
	// each chunk's 50 ms started only after the one before it was written.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("8 MiB echoed in %v: the delay limits throughput", d)
	}
	up, down := p.Forwarded()
	if up != int64(len(data)) || down != int64(len(data)) {
		t.Errorf("forwarded %d up, %d down; want %d each", up, down, len(data))
	}
}

func TestDelayProxyDialFailure(t *testing.T) {
	// Nothing listens there: a port below the ephemeral range, free a
	// moment ago, that no dial takes for its own end meanwhile.
	p := startProxy(t, time.Millisecond, testutil.FreeAddr(t))
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a proxied connection whose upstream dial failed: want EOF or reset")
	}
	if p.DialFailed() != 1 || p.Accepted() != 1 {
		t.Errorf("accepted %d, dial failed %d; want 1 and 1", p.Accepted(), p.DialFailed())
	}
}
