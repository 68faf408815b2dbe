package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/cluster/discovery"
)

// orrery key invite prints a token that orrery join stores (key and
// static peers); a bad token is refused and stores nothing. The netns test
// (TestNetNSJoin) joins two real agents.
func TestKeyInviteAndJoin(t *testing.T) {
	t.Setenv(auth.EnvKey, "")
	from, to := t.TempDir(), filepath.Join(t.TempDir(), "new")
	code, out, errOut := runCLI("key", "invite", "--data-dir", from, "--addr", "10.1.2.3:52400", "--addr", "[fd00::1]:5")
	if code != 0 {
		t.Fatalf("key invite: %d %s", code, errOut)
	}
	token := strings.TrimSpace(out)
	k, _, err := auth.LoadOrCreateKey(from, func(string) string { return "" })
	if err != nil || strings.Contains(errOut, k.String()) || !strings.Contains(errOut, k.Fingerprint()) {
		t.Fatalf("invite's stderr %q must name the fingerprint, never the key (%v)", errOut, err)
	}
	for _, bad := range []string{"x", token + "A", token[:len(token)-3]} {
		if code, _, e := runCLI("join", "--data-dir", to, "--timeout", "0", bad); code != 2 || !strings.Contains(e, "nothing stored") {
			t.Errorf("join %.12q…: %d %q, want 2 and nothing stored", bad, code, e)
		}
	}
	if _, err := os.Stat(to); !os.IsNotExist(err) {
		t.Fatalf("refused tokens left %s (%v)", to, err)
	}
	if code, _, e := runCLI("join", "--data-dir", to, "--timeout", "0", token); code != 0 {
		t.Fatalf("join: %d %s", code, e)
	}
	got, _, err := auth.LoadOrCreateKey(to, func(string) string { return "" })
	peers, perr := discovery.LoadPeers(to)
	if err != nil || got != k || perr != nil || !slices.Equal(peers, []string{"10.1.2.3:52400", "[fd00::1]:5"}) {
		t.Errorf("stored key %v (%v), peers %v (%v)", got.Fingerprint(), err, peers, perr)
	}
	// Joining again adds no duplicate peer.
	runCLI("join", "--data-dir", to, "--timeout", "0", token)
	if peers, _ := discovery.LoadPeers(to); len(peers) != 2 {
		t.Errorf("a second join left peers %v", peers)
	}
	// As root into a data dir another user owns (sudo orrery join
	// --data-dir /var/lib/orrery), the files go to that user.
	if os.Geteuid() == 0 {
		svc := t.TempDir()
		if err := os.Chown(svc, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if code, _, e := runCLI("join", "--data-dir", svc, "--timeout", "0", token); code != 0 {
			t.Fatalf("join into another user's dir: %d %s", code, e)
		}
		for _, n := range []string{auth.KeyFileName, discovery.PeersFile} {
			st, err := os.Stat(filepath.Join(svc, n))
			if err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, want owned by the dir's owner, mode 0600 (%v)", n, st.Sys(), err)
			}
		}
	}
	if code, _, e := runCLI("key", "invite", "--data-dir", from, "--addr", "nohost"); code != 2 || !strings.Contains(e, `"nohost"`) {
		t.Errorf("invite with a bad --addr: %d %q", code, e)
	}
}
