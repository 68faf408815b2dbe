//go:build linux

package netnstest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NetnsDir is where ip netns keeps a bind mount of each named namespace.
const NetnsDir = "/var/run/netns"

// Require fails t (it never skips) unless the test runs as root and every
// named command (e.g. "ip", "tc") is on PATH.
func Require(t testing.TB, cmds ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates network namespaces and must run as root")
	}
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("this test needs %s (iproute2): %v", c, err)
		}
	}
}

// Cmd runs a command, bounded by 10 s, and fails t with its output when it
// fails. It returns the combined output.
func Cmd(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Add creates the network namespace name with its loopback up, and deletes
// it when the test ends. Register it before anything that runs inside it,
// so that (cleanups running last-in first-out) it is deleted last.
func Add(t testing.TB, name string) {
	t.Helper()
	// A namespace left over by a killed run of the same pid is stale.
	exec.Command("ip", "netns", "del", name).Run()
	Cmd(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	Cmd(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// Veth joins two namespaces with a veth pair: devA in nsA with addrA, devB
// in nsB with addrB (CIDR, e.g. "10.231.0.1/24"), both up. Device names
// are at most 15 bytes. Deleting either namespace deletes the pair.
func Veth(t testing.TB, nsA, devA, addrA, nsB, devB, addrB string) {
	t.Helper()
	Cmd(t, "ip", "link", "add", devA, "netns", nsA, "type", "veth", "peer", "name", devB, "netns", nsB)
	for _, x := range []struct{ ns, dev, addr string }{{nsA, devA, addrA}, {nsB, devB, addrB}} {
		Cmd(t, "ip", "-n", x.ns, "addr", "add", x.addr, "dev", x.dev)
		Cmd(t, "ip", "-n", x.ns, "link", "set", x.dev, "up")
	}
}

// Do runs fn on a new goroutine locked to an OS thread that has joined the
// network namespace ns, waits for it and returns its error. The thread is
// never unlocked: the runtime discards it when the goroutine ends. Sockets
// fn creates on its own goroutine belong to ns; goroutines fn starts do
// not run in ns. Use IP literals: name resolution may run elsewhere.
func Do(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread, on purpose (see above).
		fd, err := unix.Open(filepath.Join(NetnsDir, ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", ns, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen opens a listener inside ns.
func Listen(ns, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := Do(ns, func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// Dial connects from inside ns.
func Dial(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := Do(ns, func() (err error) {
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections are made inside ns. Each
// request gets a new connection (keep-alives off) and no proxy is used.
// http.Transport dials on goroutines of its own, so a client made on a
// thread in ns would not be enough: its DialContext is what enters ns.
func HTTPClient(ns string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return Dial(ctx, ns, network, addr)
		},
	}}
}
