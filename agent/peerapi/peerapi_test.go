package peerapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/orrery-cluster/orrery/internal/ident"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// TestClientReachesServerOverStreams runs a real http.Server on a Listener
// fed with in-memory pipes, as the cluster feeds it stream links.
func TestClientReachesServerOverStreams(t *testing.T) {
	testutil.CheckLeaks(t)
	ln := NewListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.Host)
	})}
	go srv.Serve(ln)
	var dialled []string
	c := NewClient(func(ctx context.Context, node string) (net.Conn, error) {
		dialled = append(dialled, node)
		a, b := net.Pipe()
		go ln.Offer(b)
		return a, nil
	})
	resp, err := c.Get("http://node-1/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello from node-1" || len(dialled) != 1 || dialled[0] != "node-1" {
		t.Fatalf("got %q, dialled %v", b, dialled)
	}
	c.CloseIdleConnections()
	srv.Close()
	ln.Close()
	// Offers after Close are refused: the conn is closed, not leaked.
	a, b2 := net.Pipe()
	ln.Offer(b2)
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("an offer after Close left the conn open")
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

func TestClientRefusesBadNodeIDs(t *testing.T) {
	c := NewClient(func(context.Context, string) (net.Conn, error) {
		t.Fatal("dialled a bad node id")
		return nil, nil
	})
	_, err := c.Get("http://bad%2Fid/x")
	if err == nil {
		t.Fatal("a bad node id was accepted")
	}
	_, err = c.Get("http://a.b/x")
	if !errors.Is(err, ident.ErrInvalid) {
		t.Fatalf("a.b: %v, want ident.ErrInvalid", err)
	}
}
