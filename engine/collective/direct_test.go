package collective

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A tensor-parallel rank's port, over real loopback sockets: connections
// that send nothing or the wrong token, ahead of the agent's, neither hold
// it up nor reach the group; Close ends a waiting Accept.
func TestCheckingListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := checking(ln, agentAuth("tok"))
	dial := func(token string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if token != "" {
			if err := runnerapi.SendAuth(c, token); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	dial("") // sends nothing: ReadAuth waits 5 s for it
	wrong := dial("not-tok")
	good := dial("tok")
	good.Write([]byte("after the token"))
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	select {
	case c := <-accepted:
		// The agent's connection: what follows its token is there.
		b := make([]byte, len("after the token"))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "after the token" {
			t.Errorf("the accepted connection reads %q, %v", b, err)
		}
		c.Close()
	case <-time.After(3 * time.Second):
		t.Fatal("the agent's connection was not accepted within 3 s, behind one that sends nothing")
	}
	wrong.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := wrong.Read(make([]byte, 8)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("the wrong token's connection: read %d bytes, %v; want it closed", n, err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		l.Close()
	}()
	if c, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, %v; want net.ErrClosed", c, err)
	}
}
