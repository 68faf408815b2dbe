package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

func TestStaticPeer(t *testing.T) {
	testutil.CheckLeaks(t)
	cfg := testConfig(t, "a")
	cfg.Static = []string{"127.0.0.1:7101", "127.0.0.1:7000"} // the second one is ourselves
	d := mustNew(t, cfg)
	start(t, d)
	want := netip.MustParseAddrPort("127.0.0.1:7101")
	testutil.WaitFor(t, "the static peer", func() bool { return len(d.Peers()) > 0 })
	ps := d.Peers()
	if len(ps) != 1 || ps[0].NodeID != "" || ps[0].Source != SourceStatic || !slices.Equal(ps[0].Addrs, []netip.AddrPort{want}) {
		t.Fatalf("Peers() = %+v, want one static peer at %v (and not ourselves)", ps, want)
	}
	if r := d.Diagnose(); r.PeersFound != 1 || !r.Mode.Static || len(r.Problems) != 0 {
		t.Fatalf("Diagnose() = %+v", r)
	}
}

// TestStaticDedupe: a static address that loopback already identified is
// listed once, under its node id.
func TestStaticDedupe(t *testing.T) {
	dir := t.TempDir()
	cfg := loopbackConfig(t, dir, "a", 7001)
	cfg.Static = []string{"127.0.0.1:7002", "127.0.0.1:7003"}
	a := mustNew(t, cfg)
	b := mustNew(t, loopbackConfig(t, dir, "b", 7002))
	start(t, a)
	start(t, b)
	testutil.WaitFor(t, "b and the other static peer", func() bool {
		ps := a.Peers()
		return len(ps) == 2 && ps[0].NodeID == "b" && ps[1].Source == SourceStatic
	})
	if ps := a.Peers(); ps[1].Addrs[0].Port() != 7003 {
		t.Fatalf("Peers() = %+v: want b, then the static peer on 7003 only", ps)
	}
}

func TestStaticUnresolvable(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.Static = []string{"no-such-host.invalid:7000", "peer.test:7102"}
	d := mustNew(t, cfg)
	// A real resolver may wait for a DNS server that is not there.
	var mu sync.Mutex
	resolves := true
	d.hooks.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		if host == "peer.test" && resolves {
			return []netip.Addr{netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.2")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	start(t, d)
	testutil.WaitFor(t, "peer.test to resolve", func() bool { return len(d.Peers()) == 1 })
	want := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:7102"), netip.MustParseAddrPort("[::1]:7102")}
	if ps := d.Peers(); !slices.Equal(ps[0].Addrs, want) {
		t.Fatalf("Peers() = %+v, want addresses %v (IPv4 first)", ps, want)
	}
	// Once it stops resolving for 3 rounds, it is dropped.
	mu.Lock()
	resolves = false
	mu.Unlock()
	testutil.WaitFor(t, "nothing-found", func() bool { _, ok := problem(d.Diagnose(), CodeNothingFound); return ok })
	p, _ := problem(d.Diagnose(), CodeNothingFound)
	if !strings.Contains(p.Message, "no-such-host.invalid:7000 does not resolve") || !strings.Contains(p.Hint, "--peer") {
		t.Fatalf("nothing-found = %+v", p)
	}
}

func TestReportDialUnreachable(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.Static = []string{"127.0.0.1:7101"}
	d := mustNew(t, cfg)
	start(t, d)
	testutil.WaitFor(t, "the static peer", func() bool { return len(d.Peers()) == 1 })

	d.ReportDial("", "127.0.0.1:7101", errors.New("dial tcp 127.0.0.1:7101: connect: connection refused"), false)
	r := d.Diagnose()
	p, ok := problem(r, CodePeerUnreachable)
	if !ok {
		t.Fatalf("no peer-unreachable after a failed dial: %+v", r)
	}
	for _, want := range []string{"127.0.0.1:7101", "connection refused"} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("peer-unreachable message %q lacks %q", p.Message, want)
		}
	}
	if !strings.Contains(p.Hint, "firewall") || !strings.Contains(p.Hint, "7101") {
		t.Errorf("peer-unreachable hint %q", p.Hint)
	}
	if _, ok := problem(r, CodeNothingFound); ok {
		t.Errorf("nothing-found alongside a found peer: %+v", r.Problems)
	}

	d.ReportDial("", "127.0.0.1:7101", nil, false)
	if r := d.Diagnose(); len(r.Problems) != 0 {
		t.Fatalf("problems after a successful dial: %+v", r.Problems)
	}

	// A key mismatch found while dialling is a key-mismatch, not unreachable.
	d.ReportDial("", "127.0.0.1:7101", fmt.Errorf("tls: bad certificate"), true)
	r = d.Diagnose()
	p, ok = problem(r, CodeKeyMismatch)
	if !ok || !strings.Contains(p.Message, "127.0.0.1:7101") || !strings.Contains(p.Message, "bad certificate") {
		t.Fatalf("key-mismatch after a mismatching dial: %+v", r.Problems)
	}
	if _, ok := problem(r, CodePeerUnreachable); ok {
		t.Fatalf("a key mismatch reported as unreachable: %+v", r.Problems)
	}
	if m := d.Mismatched(); len(m) != 1 || m[0].Source != SourceStatic {
		t.Fatalf("Mismatched() = %+v", m)
	}
}
