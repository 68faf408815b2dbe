//go:build netns

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/internal/netnstest"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// TestNetNSJoin joins a second machine with one token, mDNS off: agent A
// runs in one network namespace; `orrery key invite` there prints a token
// (A's key and its veth address); in the other namespace a malformed and
// an altered token are refused with nothing stored, then `orrery join` with
// the token stores the key and A's address as a static peer and waits,
// agent B starts on that data dir, and join returns once B is a member,
// printing doctor's report with both nodes.
func TestNetNSJoin(t *testing.T) {
	netnstest.Require(t, "ip")
	bin := buildBinary(t)
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("orj-%d-a", pid), fmt.Sprintf("orj-%d-b", pid)
	netnstest.Add(t, nsA)
	netnstest.Add(t, nsB)
	const ipA, ipB = "10.233.0.1", "10.233.0.2"
	netnstest.Veth(t, nsA, fmt.Sprintf("oj%da", pid), ipA+"/24", nsB, fmt.Sprintf("oj%db", pid), ipB+"/24")
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	noKeyEnv := []string{"ORRERY_CLUSTER_KEY="}
	a := startNetnsAgent(t, bin, "a", nsA, dirA, noKeyEnv, "--peer-addr", ipA+":52400")
	netnsPoll(t, []*netnsAgent{a}, 15*time.Second, "agent A", func() (bool, string) {
		err := a.getJSON("/node_id", &a.id)
		return err == nil && a.id != "", fmt.Sprint(err)
	})

	inNS := func(ns string, args ...string) *exec.Cmd {
		c := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
		c.Env = append(os.Environ(), noKeyEnv...)
		return c
	}
	var invErr bytes.Buffer
	c := inNS(nsA, "key", "invite", "--data-dir", dirA)
	c.Stderr = &invErr
	out, err := c.Output()
	token := strings.TrimSpace(string(out))
	if err != nil || token == "" {
		t.Fatalf("orrery key invite: %v\n%s", err, invErr.String())
	}
	in, err := auth.ParseInvite(token)
	if err != nil || len(in.Addrs) != 1 || in.Addrs[0] != ipA+":52400" {
		t.Fatalf("the invite %v (%v): want A's one reachable address, %s:52400", in, err, ipA)
	}
	keyA, _, err := auth.LoadOrCreateKey(dirA, func(string) string { return "" })
	if err != nil || in.Key != keyA {
		t.Fatalf("the invite's key is not A's (%v)", err)
	}
	if strings.Contains(invErr.String(), keyA.String()) || strings.Contains(a.stderr.String(), keyA.String()) {
		t.Fatal("the key itself was written to a log")
	}

	// Refused tokens store nothing.
	altered := []byte(token)
	altered[len(altered)/2] ^= 0x01
	for _, bad := range []string{"garbage!", string(altered), token[:len(token)/2]} {
		var stderr bytes.Buffer
		c := inNS(nsB, "join", "--data-dir", dirB, "--timeout", "0", bad)
		c.Stderr = &stderr
		err := c.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "nothing stored") {
			t.Errorf("join %.20q…: %v, %q; want exit 2 saying nothing was stored", bad, err, stderr.String())
		}
		if _, err := os.Stat(dirB); !os.IsNotExist(err) {
			t.Fatalf("a refused token left %s behind (%v)", dirB, err)
		}
	}

	// The real token: join waits while B starts.
	var joinOut, joinErr bytes.Buffer
	join := inNS(nsB, "join", "--data-dir", dirB, "--timeout", "60s", token)
	join.Stdout, join.Stderr = &joinOut, &joinErr
	if err := join.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- join.Wait() }()
	if !testutil.Eventually(10*time.Second, func() bool { peers, _ := discovery.LoadPeers(dirB); return len(peers) == 1 }) {
		t.Fatalf("join stored no static peer in %s: %s", dirB, joinErr.String())
	}
	b := startNetnsAgent(t, bin, "b", nsB, dirB, noKeyEnv, "--peer-addr", ipB+":52400")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("orrery join: %v\nstdout:\n%s\nstderr:\n%s", err, joinOut.String(), joinErr.String())
		}
	case <-time.After(75 * time.Second):
		join.Process.Kill()
		t.Fatalf("orrery join did not return; stderr:\n%s", joinErr.String())
	}
	if err := b.getJSON("/node_id", &b.id); err != nil {
		t.Fatal(err)
	}
	var st netnsClusterStatus
	if err := b.getJSON("/cluster", &st); err != nil || len(st.Members) != 2 {
		t.Fatalf("B's cluster: %+v %v", st, err)
	}
	var stA netnsClusterStatus
	if err := a.getJSON("/cluster", &stA); err != nil || len(stA.Members) != 2 || stA.MasterID != st.MasterID {
		t.Errorf("A's view %+v, B's %+v (%v)", stA, st, err)
	}
	// A joining node never takes over (docs/cluster.md): A ran first.
	if st.MasterID != a.id {
		t.Errorf("the master is %s, want A (%s), which ran first; B is %s", st.MasterID, a.id, b.id)
	}
	report := joinOut.String()
	if !strings.Contains(report, a.id[:8]) || !strings.Contains(report, b.id[:8]) {
		t.Errorf("join printed no doctor report naming both nodes:\n%s", report)
	}
	t.Logf("orrery join (mDNS off, the invite's static peer): %s\n%s", strings.TrimSpace(joinErr.String()), report)
}
