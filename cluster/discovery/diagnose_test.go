package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/mdns"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

func fakeInterfaces(ifs ...net.Interface) func() ([]net.Interface, error) {
	return func() ([]net.Interface, error) { return ifs, nil }
}

func TestDiagnoseNoMulticastInterface(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.MDNS = true
	d := mustNew(t, cfg)
	d.hooks.interfaces = fakeInterfaces(
		net.Interface{Index: 1, Name: "lo", Flags: net.FlagUp | net.FlagLoopback | net.FlagMulticast},
		net.Interface{Index: 2, Name: "eth0", Flags: net.FlagUp | net.FlagBroadcast},         // no multicast
		net.Interface{Index: 3, Name: "wlan0", Flags: net.FlagMulticast | net.FlagBroadcast}, // down
	)
	r := d.Diagnose()
	if _, ok := problem(r, CodeNoMulticastInterface); !ok || len(r.MulticastInterfaces) != 0 || !r.Mode.MDNS {
		t.Fatalf("Diagnose() = %+v, want no-multicast-interface and no interfaces", r)
	}
	// Before any round ran, nothing-found would be a guess.
	if _, ok := problem(r, CodeNothingFound); ok {
		t.Fatalf("nothing-found before any round: %+v", r.Problems)
	}

	d.hooks.interfaces = fakeInterfaces(net.Interface{Index: 2, Name: "en0", Flags: net.FlagUp | net.FlagMulticast})
	if r := d.Diagnose(); len(r.Problems) != 0 || len(r.MulticastInterfaces) != 1 || r.MulticastInterfaces[0] != "en0" {
		t.Fatalf("Diagnose() with en0 = %+v", r)
	}

	// An interface list that cannot be read proves nothing either way.
	d.hooks.interfaces = func() ([]net.Interface, error) { return nil, errors.New("netlink: denied") }
	if r := d.Diagnose(); len(r.Problems) != 0 {
		t.Fatalf("problems from an unreadable interface list: %+v", r.Problems)
	}

	// Without mDNS, no multicast interface is no problem.
	cfg.MDNS = false
	d = mustNew(t, cfg)
	d.hooks.interfaces = fakeInterfaces()
	if _, ok := problem(d.Diagnose(), CodeNoMulticastInterface); ok {
		t.Fatalf("mDNS off: %+v", d.Diagnose().Problems)
	}
}

func TestDiagnoseNothingFound(t *testing.T) {
	dir := t.TempDir()
	d := mustNew(t, loopbackConfig(t, dir, "a", 7001))
	start(t, d)
	testutil.WaitFor(t, "nothing-found", func() bool { _, ok := problem(d.Diagnose(), CodeNothingFound); return ok })
	p, _ := problem(d.Diagnose(), CodeNothingFound)
	if !strings.Contains(p.Message, dir) || !strings.Contains(p.Hint, "--peer host:port") || !strings.Contains(p.Hint, dir) {
		t.Fatalf("nothing-found = %+v", p)
	}

	// With no source at all, it says so.
	d = mustNew(t, testConfig(t, "a"))
	if p, ok := problem(d.Diagnose(), CodeNothingFound); !ok || !strings.Contains(p.Message, "no discovery source") {
		t.Fatalf("no sources: %+v", d.Diagnose())
	}
}

func TestReportJSON(t *testing.T) {
	d := mustNew(t, testConfig(t, "a"))
	d.hooks.interfaces = fakeInterfaces(net.Interface{Index: 2, Name: "en0", Flags: net.FlagUp | net.FlagMulticast})
	b, err := json.Marshal(d.Diagnose())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mode":{"mdns":false,"loopback":false,"static":false},"peersFound":0,"multicastInterfaces":["en0"],` +
		`"problems":[{"code":"nothing-found","message":"no discovery source is enabled (mDNS, static peers, loopback)",` +
		`"hint":"Start an agent on another machine, or add --peer host:port for each other agent."}]}`
	if string(b) != want {
		t.Fatalf("JSON\n got %s\nwant %s", b, want)
	}
	d.hooks.interfaces = fakeInterfaces()
	cfg := testConfig(t, "a")
	cfg.Static = []string{"127.0.0.1:7101"}
	d = mustNew(t, cfg)
	d.hooks.interfaces = fakeInterfaces()
	b, _ = json.Marshal(d.Diagnose())
	if !strings.Contains(string(b), `"multicastInterfaces":[]`) || !strings.Contains(string(b), `"problems":[]`) {
		t.Fatalf("empty lists must be [] not null: %s", b)
	}
}

func TestSendRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "write", Net: "udp4", Err: os.NewSyscallError("sendto", syscall.EHOSTUNREACH)}, true},
		{&net.OpError{Op: "write", Net: "udp6", Err: os.NewSyscallError("sendto", syscall.ENETUNREACH)}, true},
		{&net.OpError{Op: "write", Net: "udp4", Err: os.NewSyscallError("sendto", syscall.EPERM)}, true},
		{&net.OpError{Op: "listen", Net: "udp4", Err: os.NewSyscallError("bind", syscall.EACCES)}, true},
		{errors.New("failed to bind to any multicast udp port ([ERR] mdns: Failed to bind to udp4 port: listen udp4 224.0.0.251:5353: setsockopt: operation not permitted)"), true},
		{errors.New("failed to bind to any multicast udp port ([ERR] mdns: Failed to bind to udp4 port: listen udp4 224.0.0.251:5353: setsockopt: no such device)"), true},
		{errors.New("failed to bind to any multicast udp port ([ERR] mdns: Failed to bind to udp4 port: listen udp4 224.0.0.251:5353: bind: address already in use)"), false},
		{&net.OpError{Op: "write", Net: "udp4", Err: os.NewSyscallError("sendto", syscall.EMSGSIZE)}, false},
	} {
		if got := sendRefused(tc.err); got != tc.want {
			t.Errorf("sendRefused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestDiagnoseMulticastSendRefused(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.MDNS = true
	d := mustNew(t, cfg)
	d.hooks.interfaces = fakeInterfaces(net.Interface{Index: 2, Name: "en0", Flags: net.FlagUp | net.FlagMulticast})
	refused := &net.OpError{Op: "write", Net: "udp4", Err: os.NewSyscallError("sendto", syscall.EHOSTUNREACH)}
	d.hooks.query = func(context.Context, *mdns.QueryParam) error { return refused }
	var st mdnsState
	d.browse(context.Background(), &st)
	p, ok := problem(d.Diagnose(), CodeMulticastSendRefused)
	if !ok || !strings.Contains(p.Message, "no route to host") ||
		!strings.Contains(p.Hint, "System Settings → Privacy & Security → Local Network") {
		t.Fatalf("Diagnose() = %+v, want multicast-send-refused with the macOS hint", d.Diagnose())
	}
	if st.ipv6Off {
		t.Fatal("IPv6 turned off although IPv4 alone failed too")
	}

	// A later query that works clears it: the problem is about the last send.
	d.hooks.query = func(context.Context, *mdns.QueryParam) error { return nil }
	d.browse(context.Background(), &st)
	if r := d.Diagnose(); len(r.Problems) != 0 {
		t.Fatalf("problems after a working query: %+v", r.Problems)
	}
}
