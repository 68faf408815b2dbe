package runner

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The rank port, over real loopback sockets: a connection that sends
// nothing, one that announces a 64 MiB frame and one with a wrong token
// are refused without holding up the agent's, and the runner sends nothing
// on a connection before the token is checked.
func TestRankPortChecksTheTokenFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Rank 0 of 2, the next (and previous) rank: it answers the hello
	// of rank 1's outbound link.
	next, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	go func() {
		c, err := next.Accept()
		if err != nil {
			return
		}
		l := NewLink(c)
		l.handshake(linkHello{Instance: "inst", From: 0, To: 1}, func(linkHello) error { return nil })
	}()
	s := NewServer(Config{Token: "tok-1", Instance: "inst", Rank: 1, Shape: runnerapi.Shape{Pipeline: 2, Tensor: 1}, RankListener: ln,
		DialNext: func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", next.Addr().String())
		}})
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial() // sends nothing
	huge := dial()
	var hdr [5]byte
	hdr[0] = frameHello
	binary.LittleEndian.PutUint32(hdr[1:], MaxFrame)
	huge.Write(hdr[:])
	wrong := dial()
	if err := runnerapi.SendAuth(wrong, "tok-0"); err != nil {
		t.Fatal(err)
	}
	// The agent's link: the token, then the previous rank's hello.
	good := dial()
	if err := runnerapi.SendAuth(good, "tok-1"); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(linkHello{Instance: "inst", From: 0, To: 1})
	l := NewLink(good)
	if _, err := l.send(frameHello, func(p []byte) []byte { return append(p, b...) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	in, out, err := s.connect(ctx)
	if err != nil {
		t.Fatalf("connect with a silent, a huge and a wrong connection ahead of the agent's: %v", err)
	}
	in.Close()
	out.Close()
	// The agent's link got the runner's hello; the huge and the wrong
	// one nothing before they were closed.
	typ, p, _, err := l.recvFrame()
	var h linkHello
	if err != nil || typ != frameHello || json.Unmarshal(p, &h) != nil || h.From != 1 || h.To != 0 {
		t.Errorf("the agent's link got %d %s (%v), want rank 1's hello to rank 0", typ, p, err)
	}
	for name, c := range map[string]net.Conn{"huge": huge, "wrong token": wrong} {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := c.Read(make([]byte, 64)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("%s: the runner sent %d bytes (%v), want none and the connection closed", name, n, err)
		}
	}
}
