//go:build netns

// Real mDNS between two hosts, emulated by two network namespaces joined by
// a veth pair. Multicast over loopback is not something to rely on, so the
// default test run does not include this file.
//
// Run it as root on Linux with iproute2 installed:
//
//	go test -tags netns -run NetNS -v ./cluster/discovery/
//
// The test creates the namespaces orrdisc-<pid>-{a,b,c,d}: a veth pair
// between a and b (10.213.0.1/24 and .2/24, each with a 224.0.0.0/4 route
// so that mDNS has somewhere to go); in c, an up veth with an address but
// no multicast route; d has loopback only. It then re-executes this test
// binary inside the namespaces (ip netns exec) as agents, which TestMain
// below recognises by ORRERY_NETNS_AGENT, and checks that a and b find each
// other and that c and d diagnose what is wrong from the errors they get.
// The namespaces are deleted when the test ends. The test fails, never
// skips, when it cannot set this up. It takes under 2 s.
package discovery

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	envAgent = "ORRERY_NETNS_AGENT" // our node id; set: run as an agent
	envPeer  = "ORRERY_NETNS_PEER"  // the node id to wait for; empty: diagnose only
)

func TestMain(m *testing.M) {
	if id := os.Getenv(envAgent); id != "" {
		os.Exit(netnsAgent(id, os.Getenv(envPeer)))
	}
	os.Exit(m.Run())
}

// netnsAgent runs one Discovery with mDNS. It prints "FOUND <peer json>"
// once it sees the peer (or "DIAG <report json>" once Diagnose reports a
// problem, when there is no peer to wait for), then keeps advertising
// until its stdin closes, so that the other agent can find it too.
func netnsAgent(id, peer string) int {
	d, err := New(Config{NodeID: id, Version: "netns", KeyFP: "0123456789abcdef", PeerPort: 7000,
		BrowseInterval: 300 * time.Millisecond, MDNS: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("agent", id)})
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stdinClosed := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()

	rc := 1
	deadline := time.After(7 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
poll:
	for {
		select {
		case <-deadline:
			b, _ := json.Marshal(d.Diagnose())
			fmt.Println("TIMEOUT", string(b))
			break poll
		case <-stdinClosed:
			break poll
		case <-tick.C:
		}
		if peer == "" {
			if r := d.Diagnose(); len(r.Problems) > 0 {
				b, _ := json.Marshal(r)
				fmt.Println("DIAG", string(b))
				rc = 0
				break
			}
			continue
		}
		if i := slices.IndexFunc(d.Peers(), func(p Peer) bool { return p.NodeID == peer }); i >= 0 {
			b, _ := json.Marshal(d.Peers()[i])
			fmt.Println("FOUND", string(b))
			rc = 0
			break
		}
	}
	tick.Stop()
	<-stdinClosed
	cancel()
	if err := <-done; err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	return rc
}

// netnsAgentProc is a running agent: its first result line arrives on
// line; closing stdin stops it.
type netnsAgentProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	line  chan string
}

func startNetnsAgent(t *testing.T, ns, id, peer string) *netnsAgentProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, exe)
	cmd.Env = append(os.Environ(), envAgent+"="+id, envPeer+"="+peer)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting agent %s in %s: %v", id, ns, err)
	}
	a := &netnsAgentProc{cmd: cmd, stdin: stdin, line: make(chan string, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "FOUND ") || strings.HasPrefix(l, "DIAG ") ||
				strings.HasPrefix(l, "TIMEOUT ") || strings.HasPrefix(l, "ERROR ") {
				select {
				case a.line <- l:
				default:
				}
			}
		}
		close(a.line)
	}()
	t.Cleanup(func() {
		a.stdin.Close()
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-waited
		}
	})
	return a
}

func (a *netnsAgentProc) result(t *testing.T, want string) string {
	t.Helper()
	select {
	case l, ok := <-a.line:
		if !ok {
			t.Fatalf("agent exited without a result")
		}
		if !strings.HasPrefix(l, want+" ") {
			t.Fatalf("agent said %q, want %s", l, want)
		}
		return strings.TrimPrefix(l, want+" ")
	case <-time.After(8 * time.Second):
		t.Fatalf("no %s from the agent within 8s", want)
	}
	return ""
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func TestMDNSBetweenNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test creates network namespaces and must run as root (see the file comment)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("this test needs iproute2's ip: %v", err)
	}
	pid := os.Getpid() % 100000
	nsA, nsB, nsC := fmt.Sprintf("orrdisc-%d-a", pid), fmt.Sprintf("orrdisc-%d-b", pid), fmt.Sprintf("orrdisc-%d-c", pid)
	nsD := fmt.Sprintf("orrdisc-%d-d", pid)
	for _, ns := range []string{nsA, nsB, nsC, nsD} {
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	vA, vB := fmt.Sprintf("od%da", pid), fmt.Sprintf("od%db", pid)
	ipCmd(t, "link", "add", vA, "netns", nsA, "type", "veth", "peer", "name", vB, "netns", nsB)
	for _, x := range []struct{ ns, dev, addr string }{{nsA, vA, "10.213.0.1/24"}, {nsB, vB, "10.213.0.2/24"}} {
		ipCmd(t, "-n", x.ns, "addr", "add", x.addr, "dev", x.dev)
		ipCmd(t, "-n", x.ns, "link", "set", x.dev, "up")
		ipCmd(t, "-n", x.ns, "route", "add", "224.0.0.0/4", "dev", x.dev)
	}

	t.Run("find each other", func(t *testing.T) {
		a := startNetnsAgent(t, nsA, "node-a", "node-b")
		b := startNetnsAgent(t, nsB, "node-b", "node-a")
		for _, x := range []struct {
			agent *netnsAgentProc
			id    string
			addr  string
		}{{a, "node-b", "10.213.0.2:7000"}, {b, "node-a", "10.213.0.1:7000"}} {
			var p Peer
			if err := json.Unmarshal([]byte(x.agent.result(t, "FOUND")), &p); err != nil {
				t.Fatal(err)
			}
			if p.NodeID != x.id || p.Source != SourceMDNS || p.KeyFP != "0123456789abcdef" || p.Version != "netns" ||
				len(p.Addrs) == 0 || p.Addrs[0] != netip.MustParseAddrPort(x.addr) {
				t.Errorf("found %+v, want %s at %s first", p, x.id, x.addr)
			}
		}
	})

	// A link that is up but has no route for multicast: the send fails
	// for real and Diagnose must say so from that error.
	t.Run("no multicast route", func(t *testing.T) {
		vC, vD := fmt.Sprintf("od%dc", pid), fmt.Sprintf("od%dd", pid)
		ipCmd(t, "link", "add", vC, "netns", nsC, "type", "veth", "peer", "name", vD, "netns", nsC)
		ipCmd(t, "-n", nsC, "addr", "add", "10.213.1.1/24", "dev", vC)
		ipCmd(t, "-n", nsC, "link", "set", vC, "up")
		c := startNetnsAgent(t, nsC, "node-c", "")
		var r Report
		if err := json.Unmarshal([]byte(c.result(t, "DIAG")), &r); err != nil {
			t.Fatal(err)
		}
		if _, ok := problem(r, CodeMulticastSendRefused); !ok || !slices.Contains(r.MulticastInterfaces, vC) {
			t.Fatalf("report %+v: want multicast-send-refused and %s listed", r, vC)
		}
		t.Logf("report: %+v", r)
	})

	// Only loopback: nothing mDNS can use.
	t.Run("no multicast interface", func(t *testing.T) {
		d := startNetnsAgent(t, nsD, "node-d", "")
		var r Report
		if err := json.Unmarshal([]byte(d.result(t, "DIAG")), &r); err != nil {
			t.Fatal(err)
		}
		if _, ok := problem(r, CodeNoMulticastInterface); !ok || len(r.MulticastInterfaces) != 0 {
			t.Fatalf("report %+v: want no-multicast-interface", r)
		}
		t.Logf("report: %+v", r)
	})
}
