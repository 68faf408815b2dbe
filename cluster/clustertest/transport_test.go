package clustertest

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

func TestTransport(t *testing.T) {
	testutil.CheckLeaks(t)
	nw := NewNetwork()
	a, b := nw.Host("a"), nw.Host("b")
	ln, err := b.Listen(":7000")
	if err != nil {
		t.Fatal(err)
	}
	if ln.Addr().String() != "b:7000" {
		t.Errorf("listening at %s, want b:7000", ln.Addr())
	}
	if _, err := b.Listen("b:7000"); err == nil {
		t.Error("a second listener on b:7000")
	}
	if _, err := a.Dial(context.Background(), "b:7001"); !errors.Is(err, ErrRefused) {
		t.Errorf("dial to nobody: %v, want ErrRefused", err)
	}
	c, err := a.Dial(context.Background(), "b:7000")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := net.SplitHostPort(s.RemoteAddr().String()); h != "a" || s.LocalAddr().String() != "b:7000" || c.RemoteAddr().String() != "b:7000" {
		t.Errorf("addresses: server %s←%s, client →%s", s.LocalAddr(), s.RemoteAddr(), c.RemoteAddr())
	}
	// Both ends may write before either reads (a handshake's Hellos).
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Errorf("server read %q, %v", buf, err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Errorf("client read %q, %v", buf, err)
	}
	// A deadline in the past fails a read at once; a cleared one lets it
	// wait again.
	s.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past its deadline: %v", err)
	}
	s.SetReadDeadline(time.Time{})
	got := make(chan error, 1)
	go func() { _, err := io.ReadFull(s, buf[:2]); got <- err }()
	c.Write([]byte("ok"))
	if err := <-got; err != nil || string(buf[:2]) != "ok" {
		t.Errorf("read after clearing the deadline: %q, %v", buf[:2], err)
	}
	// Close: the peer reads what was written, then EOF; its writes fail.
	c.Write([]byte("bye"))
	c.Close()
	if b, err := io.ReadAll(s); err != nil || string(b) != "bye" {
		t.Errorf("after close: %q, %v", b, err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Error("a write to a closed peer succeeded")
	}
	if _, err := c.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read on a closed conn: %v", err)
	}
	s.Close()
	// A closed listener frees its address and refuses dials.
	ln.Close()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept after close: %v", err)
	}
	if _, err := a.Dial(context.Background(), "b:7000"); !errors.Is(err, ErrRefused) {
		t.Errorf("dial after close: %v", err)
	}
}

// A reader blocked on a deadline wakes when it passes.
func TestReadDeadlineWakesBlockedReader(t *testing.T) {
	c, s := pipe(nil, "a:1", "b:1")
	defer c.Close()
	defer s.Close()
	got := make(chan error, 1)
	go func() { _, err := s.Read(make([]byte, 1)); got <- err }()
	s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if err := <-got; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("blocked read: %v, want a deadline error", err)
	}
}
