package discovery

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/mdns"
)

// These tests replace the library's query and responder with fakes; a
// real exchange between two hosts is in mdns_netns_test.go.

func mdnsConfig(t *testing.T, id string) Config {
	cfg := testConfig(t, id)
	cfg.MDNS = true
	return cfg
}

func entry(instance string, v4 string, fields ...string) *mdns.ServiceEntry {
	e := &mdns.ServiceEntry{Name: instance + "._orrery._tcp.local.", Port: 7000, InfoFields: fields}
	if v4 != "" {
		e.AddrV4 = net.ParseIP(v4)
	}
	return e
}

func TestBrowse(t *testing.T) {
	d := mustNew(t, mdnsConfig(t, "a"))
	var seen *mdns.QueryParam
	d.hooks.query = func(_ context.Context, p *mdns.QueryParam) error {
		seen = p
		for _, e := range []*mdns.ServiceEntry{
			entry("b", "192.0.2.10", "id=b", "port=7002", "v=1.2", "kfp=0123456789ABCDEF"),
			entry("x", "192.0.2.11", "id=x", "port=7003", "v=1.2", "kfp=fedcba9876543210"),
			entry("a", "192.0.2.2", "id=a", "port=7000", "v=1.2", "kfp=0123456789abcdef"), // ourselves
			entry("bad", "192.0.2.12", "id=bad", "port=0", "v=", "kfp=0123456789abcdef"),
			entry("noaddr", "", "id=noaddr", "port=7004", "v=", "kfp=0123456789abcdef"),
			{Name: "printer._ipp._tcp.local.", AddrV4: net.ParseIP("192.0.2.99"), Port: 631, InfoFields: []string{"id=printer", "port=631", "v=", "kfp=0123456789abcdef"}},
		} {
			p.Entries <- e
		}
		// IPv6: a link-local address with its zone is kept, after IPv4.
		e := entry("c", "192.0.2.13", "id=c", "port=7005", "v=", "kfp=0123456789abcdef")
		e.AddrV6IPAddr = &net.IPAddr{IP: net.ParseIP("fe80::1"), Zone: "en0"}
		p.Entries <- e
		// Without a zone it cannot be dialled and is dropped.
		e = entry("e", "", "id=e", "port=7006", "v=", "kfp=0123456789abcdef")
		e.AddrV6IPAddr = &net.IPAddr{IP: net.ParseIP("fe80::2")}
		p.Entries <- e
		return nil
	}
	var st mdnsState
	d.browse(context.Background(), &st)

	if seen.Service != "_orrery._tcp" || seen.Domain != "local" || seen.Timeout <= 0 || seen.Timeout >= d.cfg.BrowseInterval ||
		seen.Logger == nil || seen.DisableIPv6 {
		t.Fatalf("query params %+v", seen)
	}
	ps := d.Peers()
	if got := nodeIDs(ps); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Peers() = %v, want [b c]: %+v", got, ps)
	}
	if b := ps[0]; !slices.Equal(b.Addrs, []netip.AddrPort{netip.MustParseAddrPort("192.0.2.10:7002")}) ||
		b.Source != SourceMDNS || b.Version != "1.2" || b.KeyFP != "0123456789abcdef" {
		t.Errorf("b = %+v", b)
	}
	if c := ps[1]; !slices.Equal(c.Addrs, []netip.AddrPort{netip.MustParseAddrPort("192.0.2.13:7005"), netip.MustParseAddrPort("[fe80::1%en0]:7005")}) {
		t.Errorf("c addrs = %v", c.Addrs)
	}
	if m := d.Mismatched(); len(m) != 1 || m[0].NodeID != "x" || m[0].KeyFP != "fedcba9876543210" {
		t.Fatalf("Mismatched() = %+v", m)
	}

	// mDNS is lossy: a peer survives a round without an answer and goes
	// once it has not been seen for 3 intervals.
	d.hooks.query = func(context.Context, *mdns.QueryParam) error { return nil }
	d.browse(context.Background(), &st)
	d.mu.Lock()
	d.pruneLocked(time.Now())
	d.mu.Unlock()
	if got := nodeIDs(d.Peers()); len(got) != 2 {
		t.Fatalf("peers dropped after one empty round: %v", got)
	}
	d.mu.Lock()
	d.pruneLocked(time.Now().Add(d.staleAfter + time.Second))
	d.mu.Unlock()
	if got := d.Peers(); len(got) != 0 {
		t.Fatalf("peers kept past 3 intervals: %+v", got)
	}
}

// TestBrowseIPv6Fallback: when the query fails with IPv6 on and works on
// IPv4 alone, browsing stays on IPv4 and no problem is reported.
func TestBrowseIPv6Fallback(t *testing.T) {
	d := mustNew(t, mdnsConfig(t, "a"))
	var calls []bool
	d.hooks.query = func(_ context.Context, p *mdns.QueryParam) error {
		calls = append(calls, p.DisableIPv6)
		if !p.DisableIPv6 {
			return &net.OpError{Op: "write", Net: "udp6", Err: errors.New("sendto: network is unreachable")}
		}
		p.Entries <- entry("b", "192.0.2.10", "id=b", "port=7002", "v=", "kfp=0123456789abcdef")
		return nil
	}
	var st mdnsState
	d.browse(context.Background(), &st)
	d.browse(context.Background(), &st)
	if !slices.Equal(calls, []bool{false, true, true}) || !st.ipv6Off {
		t.Fatalf("DisableIPv6 per call %v, ipv6Off %v: want [false true true] and IPv6 off", calls, st.ipv6Off)
	}
	if r := d.Diagnose(); len(r.Problems) != 0 || r.PeersFound != 1 {
		t.Fatalf("Diagnose() = %+v", r)
	}
}

func TestQueryErrorDetail(t *testing.T) {
	d := mustNew(t, mdnsConfig(t, "a"))
	d.hooks.query = func(_ context.Context, p *mdns.QueryParam) error {
		// What the library does when it cannot join the group.
		p.Logger.Printf("[ERR] mdns: Failed to bind to udp4 port: listen udp4 224.0.0.251:5353: setsockopt: operation not permitted")
		return errors.New("failed to bind to any multicast udp port")
	}
	d.browse(context.Background(), &mdnsState{})
	d.mu.Lock()
	err := d.queryErr
	d.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "operation not permitted") || !sendRefused(err) {
		t.Fatalf("query error %v: want the library's logged cause in it", err)
	}
}

type fakeServer struct{ shut int }

func (f *fakeServer) Shutdown() error { f.shut++; return nil }

func TestAdvertise(t *testing.T) {
	cfg := mdnsConfig(t, "node-1")
	cfg.PeerPort, cfg.Version = 7443, "0.3.0"
	d := mustNew(t, cfg)
	var got *mdns.Config
	srv := &fakeServer{}
	d.hooks.serve = func(c *mdns.Config) (shutdowner, error) { got = c; return srv, nil }
	var st mdnsState
	d.startResponder(&st, []net.IP{net.ParseIP("192.0.2.2")}, "k")
	if got == nil || st.server != srv {
		t.Fatal("responder not started")
	}
	svc := got.Zone.(*mdns.MDNSService)
	want := []string{"id=node-1", "port=7443", "v=0.3.0", "kfp=0123456789abcdef"}
	if svc.Instance != "node-1" || svc.Service != "_orrery._tcp" || svc.Port != 7443 || !slices.Equal(svc.TXT, want) ||
		svc.HostName != "node-1.orrery.local." || got.Logger == nil {
		t.Fatalf("service %+v, want instance node-1, port 7443, TXT %q", svc, want)
	}
	// A 64-byte node id does not fit a DNS label: the instance is cut,
	// the TXT id is not.
	long := strings.Repeat("n", 64)
	cfg.NodeID = long
	d = mustNew(t, cfg)
	d.hooks.serve = func(c *mdns.Config) (shutdowner, error) { got = c; return srv, nil }
	d.startResponder(&mdnsState{}, []net.IP{net.ParseIP("192.0.2.2")}, "k")
	svc = got.Zone.(*mdns.MDNSService)
	if len(svc.Instance) != 63 || svc.TXT[0] != "id="+long {
		t.Fatalf("instance %q, TXT %q", svc.Instance, svc.TXT)
	}
}
