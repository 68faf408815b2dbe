package discovery

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

func loopbackConfig(t *testing.T, dir, id string, port int) Config {
	cfg := testConfig(t, id)
	cfg.LoopbackDir, cfg.PeerPort = dir, port
	return cfg
}

// TestLoopbackAgentsFindEachOther runs three agents and a fourth with
// another cluster key in one process, sharing a directory.
func TestLoopbackAgentsFindEachOther(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := t.TempDir()
	ids := []string{"a", "b", "c"}
	ds := map[string]*Discovery{}
	stops := map[string]func(){}
	for i, id := range ids {
		ds[id] = mustNew(t, loopbackConfig(t, dir, id, 7001+i))
		stops[id] = start(t, ds[id])
	}
	xcfg := loopbackConfig(t, dir, "x", 7004)
	xcfg.KeyFP = "fedcba9876543210"
	x := mustNew(t, xcfg)
	start(t, x)

	others := func(self string) []string {
		return slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == self })
	}
	for _, id := range ids {
		testutil.WaitFor(t, id+" to see the other two", func() bool {
			got := nodeIDs(ds[id].Peers())
			if slices.Contains(got, id) {
				t.Fatalf("%s lists itself: %v", id, got)
			}
			return slices.Equal(got, others(id))
		})
	}

	// What a peer looks like.
	peers := ds["a"].Peers()
	b := peers[0]
	wantAddr := netip.MustParseAddrPort("127.0.0.1:7002")
	if b.NodeID != "b" || !slices.Equal(b.Addrs, []netip.AddrPort{wantAddr}) || b.Source != SourceLoopback ||
		b.Version != "test" || b.KeyFP != "0123456789abcdef" || b.LastSeen.IsZero() {
		t.Fatalf("a sees b as %+v", b)
	}

	// The agent with another key is kept apart on both sides.
	testutil.WaitFor(t, "a to see x as mismatched", func() bool { return slices.Equal(nodeIDs(ds["a"].Mismatched()), []string{"x"}) })
	if got := nodeIDs(ds["a"].Peers()); slices.Contains(got, "x") {
		t.Fatalf("a lists x among its peers: %v", got)
	}
	testutil.WaitFor(t, "x to see a, b, c as mismatched", func() bool { return slices.Equal(nodeIDs(x.Mismatched()), ids) })
	if got := x.Peers(); len(got) != 0 {
		t.Fatalf("x lists peers with another key: %v", got)
	}
	rep := ds["a"].Diagnose()
	p, ok := problem(rep, CodeKeyMismatch)
	if !ok {
		t.Fatalf("Diagnose has no key-mismatch: %+v", rep)
	}
	for _, want := range []string{`"x"`, "127.0.0.1:7004", "fedcba9876543210"} {
		if !strings.Contains(p.Message, want) {
			t.Errorf("key-mismatch message %q does not name %s", p.Message, want)
		}
	}
	for _, want := range []string{"orrery key show", "orrery key set"} {
		if !strings.Contains(p.Hint, want) {
			t.Errorf("key-mismatch hint %q lacks %q", p.Hint, want)
		}
	}
	if rep.PeersFound != 2 || !rep.Mode.Loopback || rep.Mode.MDNS || rep.Mode.Static {
		t.Errorf("report %+v: want 2 peers, loopback mode only", rep)
	}
	if _, ok := problem(rep, CodeNothingFound); ok {
		t.Errorf("nothing-found reported alongside peers: %+v", rep.Problems)
	}

	// Stopping c removes its record before Run returns; the others drop it.
	stops["c"]()
	if _, err := os.Stat(filepath.Join(dir, "c.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("c.json after c stopped: %v", err)
	}
	for _, id := range []string{"a", "b"} {
		testutil.WaitFor(t, id+" to drop c", func() bool { return !slices.Contains(nodeIDs(ds[id].Peers()), "c") })
	}
	if got := nodeIDs(ds["a"].Peers()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a sees %v after c stopped, want [b]", got)
	}
}

// TestLoopbackStaleRecords: records of dead processes, records not
// refreshed in time and old unreadable files are ignored and removed; a
// fresh unreadable file is ignored and left alone.
func TestLoopbackStaleRecords(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := t.TempDir()

	// A pid that certainly existed and is now gone: a child we waited for.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatalf("running a child for its pid: %v", err)
	}
	deadPID := cmd.ProcessState.Pid()
	if pidAlive(deadPID) {
		t.Fatalf("pid %d of a reaped child still probes alive", deadPID)
	}

	write := func(name, content string, age time.Duration) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if age > 0 {
			old := time.Now().Add(-age)
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	record := func(id string, pid int) string {
		data, err := LoopbackRecord{NodeID: id, Port: 7100, KeyFP: "0123456789abcdef", PID: pid}.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	dead := write("ghost.json", record("ghost", deadPID), 0)
	old := write("old.json", record("old", os.Getpid()), time.Hour)
	oldJunk := write("junk.json", "not a record", time.Hour)
	freshJunk := write("newjunk.json", "not a record either", 0)
	misnamed := write("alias.json", record("someone", os.Getpid()), 0)

	cfg := loopbackConfig(t, dir, "a", 7001)
	// Long enough that the fresh files below stay fresh (3 intervals)
	// while the first round, which runs at once, does the work.
	cfg.BrowseInterval = time.Second
	d := mustNew(t, cfg)
	start(t, d)
	gone := func(path string) bool { _, err := os.Stat(path); return errors.Is(err, fs.ErrNotExist) }
	testutil.WaitFor(t, "stale records to be removed", func() bool {
		if ps := d.Peers(); len(ps) != 0 {
			t.Fatalf("stale or invalid records listed as peers: %+v", ps)
		}
		return gone(dead) && gone(old) && gone(oldJunk)
	})
	// Our own record is there and fresh files that are not records stay.
	for _, path := range []string{filepath.Join(dir, "a.json"), freshJunk, misnamed} {
		if gone(path) {
			t.Errorf("%s was removed", filepath.Base(path))
		}
	}
	if ps := d.Peers(); len(ps) != 0 {
		t.Fatalf("peers from invalid records: %+v", ps)
	}
}

func TestNewCreatesLoopbackDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "dir")
	mustNew(t, loopbackConfig(t, dir, "a", 7001))
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("loopback dir not created: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := New(loopbackConfig(t, filepath.Join(file, "sub"), "a", 7001)); err == nil || !strings.Contains(err.Error(), "loopback dir") {
		t.Fatalf("New with a loopback dir under a file: %v, want a loopback dir error", err)
	}
}
