package supervisor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// loadingSupervisor is a supervisor of node "me", on clock, whose ranks
// stay loading (their model file never comes) until they are stopped;
// stops counts the stops of each runner.
func loadingSupervisor(t *testing.T, clock *testutil.Clock, owns func(string) bool, alive func(string) bool, grace time.Duration) (*Supervisor, func(string) int) {
	t.Helper()
	var mu sync.Mutex
	stops := map[string]int{}
	s := New(Config{NodeID: "me", Owns: owns, Alive: alive, MissingGrace: grace, Now: clock.Now, Publish: func(state.Event) error { return nil },
		ModelFile: func(ctx context.Context, in state.Instance, rank int, _ func(Progress)) (string, ShardInfo, error) {
			<-ctx.Done()
			mu.Lock()
			stops[RunnerID(in.InstanceID, rank)]++
			mu.Unlock()
			return "", ShardInfo{}, ctx.Err()
		}})
	t.Cleanup(s.Close)
	return s, func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return stops[id]
	}
}

func instanceOn(id, owner string) state.Instance {
	return state.Instance{InstanceID: id, ModelID: "m", NodeID: owner, Status: state.InstanceStatusActive,
		Ranks: []state.ShardRange{{Rank: 0, NodeID: owner, LastLayer: 2}, {Rank: 1, NodeID: "me", FirstLayer: 2, LastLayer: 4}}}
}

func running(s *Supervisor, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.procs[id]
	return ok
}

// A snapshot that lacks an instance stops none of its runners while its
// owner is alive (another node, for the grace; this node, while its record
// holds it); a deletion this node applied, a Failed status, an owner gone
// or the grace passed stop them.
func TestReconcileKeepsRunnersOfLiveOwners(t *testing.T) {
	owned := map[string]bool{"mine": true}
	var mu sync.Mutex
	aliveNodes := map[string]bool{"other": true, "me": true}
	const grace = 10 * time.Second
	clock := testutil.NewClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	s, stops := loadingSupervisor(t, clock, func(id string) bool { mu.Lock(); defer mu.Unlock(); return owned[id] },
		func(id string) bool { mu.Lock(); defer mu.Unlock(); return aliveNodes[id] }, grace)
	mine := instanceOn("mine", "me")
	mine.Ranks = []state.ShardRange{{Rank: 0, NodeID: "me", LastLayer: 4}}
	theirs, deleted, failed := instanceOn("theirs", "other"), instanceOn("deleted", "other"), instanceOn("failed", "other")
	full := state.State{Instances: map[string]state.Instance{"mine": mine, "theirs": theirs, "deleted": deleted, "failed": failed}}
	s.Reconcile(full)
	for _, id := range []string{"mine-0", "theirs-1", "deleted-1", "failed-1"} {
		if !running(s, id) {
			t.Fatalf("runner %s not started", id)
		}
	}
	// A snapshot from a master that lost them all; one was deleted (its
	// event applied here), one failed.
	failed.Status = state.InstanceStatusFailed
	s.Deleted("deleted")
	s.Reconcile(state.State{Instances: map[string]state.Instance{"failed": failed}})
	if running(s, "deleted-1") || running(s, "failed-1") {
		t.Error("the deleted or the failed instance's runner still runs")
	}
	if !running(s, "mine-0") || !running(s, "theirs-1") {
		t.Fatal("a snapshot stopped a runner whose owner is alive")
	}
	// The owners assert their instances again: the same runners go on. A
	// stale state that still shows the deleted one starts nothing.
	s.Reconcile(full)
	if running(s, "deleted-1") {
		t.Error("the deleted instance's runner started again from a stale state")
	}
	clock.Advance(grace + time.Second) // past the grace: it was reset
	s.Reconcile(state.State{Instances: map[string]state.Instance{}})
	if !running(s, "mine-0") || !running(s, "theirs-1") || stops("mine-0") != 0 || stops("theirs-1") != 0 {
		t.Fatal("runners restarted or stopped though their instances came back")
	}
	// Within the grace it stays...
	clock.Advance(grace - time.Second)
	s.Reconcile(state.State{Instances: map[string]state.Instance{}})
	if !running(s, "theirs-1") {
		t.Fatal("another node's instance lost its runner within the grace")
	}
	// ...and another owner's instance that does not come back within the
	// grace goes; this node's own stays while its record holds it.
	clock.Advance(2 * time.Second)
	s.Reconcile(state.State{Instances: map[string]state.Instance{}})
	if running(s, "theirs-1") {
		t.Error("another node's instance, missing past the grace, still has a runner")
	}
	if !running(s, "mine-0") {
		t.Error("this node's own instance, still in its record, lost its runner")
	}
	mu.Lock()
	delete(owned, "mine")
	mu.Unlock()
	s.Reconcile(state.State{Instances: map[string]state.Instance{}})
	if running(s, "mine-0") {
		t.Error("this node's instance, gone from its record too, still has a runner")
	}
	// An owner that is not alive: its missing instance's runner stops at
	// once.
	gone := instanceOn("gone", "ghost")
	s.Reconcile(state.State{Instances: map[string]state.Instance{"gone": gone}})
	if !running(s, "gone-1") {
		t.Fatal("runner gone-1 not started")
	}
	s.Reconcile(state.State{Instances: map[string]state.Instance{}})
	if running(s, "gone-1") {
		t.Error("the runner of a missing instance whose owner is not a member still runs")
	}
}
