//go:build netns && netnsdiag

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/netnstest"
)

func echoRTTs(t *testing.T, ns, addr string, n int, every time.Duration) []float64 {
	c, err := netnstest.Dial(context.Background(), ns, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	buf := make([]byte, 100)
	var out []float64
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, float64(time.Since(t0))/1e6)
		time.Sleep(every)
	}
	return out
}

func TestNetNSDiag(t *testing.T) {
	netnstest.Require(t, "ip", "tc")
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("orr-%d-a", pid), fmt.Sprintf("orr-%d-b", pid)
	vethA, vethB := fmt.Sprintf("orr%da", pid), fmt.Sprintf("orr%db", pid)
	netnstest.Add(t, nsA)
	netnstest.Add(t, nsB)
	netnstest.Veth(t, nsA, vethA, netnsIPA+"/24", nsB, vethB, netnsIPB+"/24")
	eln, err := netnstest.Listen(nsB, "tcp", netnsIPB+":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer eln.Close()
	go func() {
		for {
			c, err := eln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetNoDelay(true)
			go io.Copy(c, c)
		}
	}()
	pln, _ := netnstest.Listen(nsA, "tcp", netnsIPA+":0")
	proxy := netnstest.NewDelayProxy(pln, netnsDelay, func(ctx context.Context) (net.Conn, error) {
		return netnstest.Dial(ctx, nsA, "tcp", netnsIPB+":7000")
	})
	defer proxy.Close()
	t.Logf("idle direct: %s", netnsSummary(echoRTTs(t, nsA, netnsIPB+":7000", 40, 37*time.Millisecond)))
	t.Logf("idle proxy:  %s", netnsSummary(echoRTTs(t, nsA, proxy.Addr().String(), 40, 37*time.Millisecond)))

	if os.Getenv("DIAG_AGENTS") != "" {
		bin := buildBinary(t)
		p2ln, _ := netnstest.Listen(nsA, "tcp", netnsIPA+":0")
		p2 := netnstest.NewDelayProxy(p2ln, netnsDelay, func(ctx context.Context) (net.Conn, error) {
			return netnstest.Dial(ctx, nsA, "tcp", net.JoinHostPort(netnsIPB, netnsPeerPort))
		})
		defer p2.Close()
		env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
		dir := t.TempDir()
		a := startNetnsAgent(t, bin, "a", nsA, filepath.Join(dir, "a"), env, "--peer-addr", net.JoinHostPort(netnsIPA, netnsPeerPort), "--peer", p2.Addr().String())
		b := startNetnsAgent(t, bin, "b", nsB, filepath.Join(dir, "b"), env, "--peer-addr", net.JoinHostPort(netnsIPB, netnsPeerPort))
		time.Sleep(3 * time.Second)
		rec := netnsRecordProbes(map[string]*netnsAgent{"a→b": a, "b→a": b})
		t.Logf("busy direct: %s", netnsSummary(echoRTTs(t, nsA, netnsIPB+":7000", 200, 37*time.Millisecond)))
		t.Logf("busy proxy:  %s", netnsSummary(echoRTTs(t, nsA, proxy.Addr().String(), 200, 37*time.Millisecond)))
		for k, v := range rec() {
			t.Logf("agent %s: %s", k, netnsSummary(v))
		}
	}
}
