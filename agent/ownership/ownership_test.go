package ownership

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

func newStore() (*state.Store, *state.LocalSequencer) {
	st := state.NewStore(state.NewLog(64), state.NewMemoryHistory(time.Minute))
	return st, &state.LocalSequencer{Store: st}
}

func instance(id string, pinned bool, nodes ...string) state.Instance {
	in := state.Instance{InstanceID: id, ModelID: "demo", NodeID: "a", Status: state.InstanceStatusActive, Pinned: pinned}
	for i, n := range nodes {
		in.Ranks = append(in.Ranks, state.ShardRange{Rank: i, NodeID: n, FirstLayer: i, LastLayer: i + 1})
	}
	return in
}

func run(t *testing.T, l *Ledger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The state loses this node's instance (a snapshot from a master that
// never saw it): the ledger notices and asserts it again.
func TestLedgerRepairsTheState(t *testing.T) {
	store, seq := newStore()
	l, err := New(Config{Self: "a", Store: store, Sequence: seq.Publish, Every: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(state.NodeIdentityMeasured{NodeID: "a", Identity: state.NodeIdentity{NodeID: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(state.InstanceCreated{NodeID: "a", Instance: instance("i1", true, "a")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Publish(state.InstanceCreated{NodeID: "a b"}); err == nil {
		t.Fatal("an invalid event was published")
	}
	lost := state.New()
	lost.LastEventAppliedIdx = store.State().LastEventAppliedIdx
	store.Restore(lost)
	run(t, l)
	testutil.WaitFor(t, "instance asserted again", func() bool {
		_, ok := store.State().Instances["i1"]
		return ok && store.State().NodeIdentities["a"].NodeID == "a"
	})
	if n := l.Asserts(); n != 1 {
		t.Errorf("%d assertions, want 1", n)
	}
	// Kick asserts at once, whatever the state.
	l.Kick("test")
	testutil.WaitFor(t, "kicked assertion", func() bool { return l.Asserts() == 2 })
}

// The instances file: written on every change, read back at start with
// the pinned instances restored; a restored instance whose rank's node
// does not come back is marked Failed, saying why.
func TestLedgerRestoresPinnedInstances(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	store, seq := newStore()
	l, err := New(Config{Self: "a", Path: path, Store: store, Sequence: seq.Publish})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []state.Instance{instance("pinned", true, "a", "b"), instance("demand", false, "a"), instance("local", true, "a")} {
		if err := l.Publish(state.InstanceCreated{NodeID: "a", Instance: in}); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), `"demand"`) {
		t.Fatalf("instances file: %v %s", err, b)
	}

	// Restart: a fresh store, b never rejoins.
	store2, seq2 := newStore()
	seq2.Publish(state.NodeIdentityMeasured{NodeID: "a", Identity: state.NodeIdentity{NodeID: "a"}})
	l2, err := New(Config{Self: "a", Path: path, Store: store2, Sequence: seq2.Publish, Every: 20 * time.Millisecond, RejoinWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l2.Kick("agent started")
	run(t, l2)
	testutil.WaitFor(t, "pinned instances restored", func() bool {
		s := store2.State()
		_, p := s.Instances["pinned"]
		_, lo := s.Instances["local"]
		_, d := s.Instances["demand"]
		return p && lo && !d
	})
	testutil.WaitFor(t, "instance with a missing rank failed", func() bool {
		return store2.State().Instances["pinned"].Status == state.InstanceStatusFailed
	})
	if e := store2.State().Instances["pinned"].Error; !strings.Contains(e, "node b (rank 1) did not rejoin") {
		t.Errorf("failure reason %q", e)
	}
	if s := store2.State().Instances["local"]; s.Status != state.InstanceStatusActive {
		t.Errorf("instance on this node only: %+v", s)
	}
}

func TestLedgerSetsAsideABadFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"garbage":     "{not json",
		"other node":  `{"nodeId":"z","instances":[]}`,
		"foreign":     `{"nodeId":"a","instances":[{"instanceId":"x","nodeId":"z","ranks":[{"rank":0,"nodeId":"z"}]}]}`,
		"no ranks":    `{"nodeId":"a","instances":[{"instanceId":"x","nodeId":"a"}]}`,
		"bad node id": `{"nodeId":"a","instances":[{"instanceId":"x","nodeId":"a b","ranks":[{"rank":0,"nodeId":"a"}]}]}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		os.WriteFile(path, []byte(body), 0o600)
		store, seq := newStore()
		l, err := New(Config{Self: "a", Path: path, Store: store, Sequence: seq.Publish})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := len(l.own.Instances()); n != 0 {
			t.Errorf("%s: %d instances restored", name, n)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: file not set aside", name)
		}
		if m, _ := filepath.Glob(path + ".corrupt-*"); len(m) != 1 {
			t.Errorf("%s: set-aside copies %v", name, m)
		}
	}
}
