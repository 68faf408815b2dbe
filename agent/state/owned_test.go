package state

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func inst(id, owner string, rankNodes ...string) Instance {
	in := Instance{InstanceID: id, ModelID: "demo", NodeID: owner, CreatedAt: t0, Status: InstanceStatusActive, Pinned: true}
	for i, n := range rankNodes {
		in.Ranks = append(in.Ranks, ShardRange{Rank: i, NodeID: n, FirstLayer: 4 * i, LastLayer: 4*i + 4})
	}
	return in
}

func testRunner(inID, node string, rank int, status string) Runner {
	return Runner{RunnerID: inID + "-" + string(rune('0'+rank)), InstanceID: inID, NodeID: node, Rank: rank, Status: status}
}

// A node's record, asserted into a state that lost its part (a new
// master's snapshot from the other side of a partition), restores it and
// leaves the other nodes' parts alone.
func TestAssertionRestoresWhatTheStateLost(t *testing.T) {
	own := NewOwned("a")
	var s State = New() // the state that knows a's events
	for _, ev := range []Event{
		NodeIdentityMeasured{NodeID: "a", Identity: NodeIdentity{NodeID: "a", FriendlyName: "alpha"}},
		NodeMemoryMeasured{NodeID: "a", Memory: NodeMemory{RAMAvailable: Bytes(7)}},
		NodeModelsMeasured{NodeID: "a", Models: NodeModels{Models: []ModelInfo{{ID: "demo"}}}},
		InstanceCreated{NodeID: "a", Instance: inst("i1", "a", "a", "b")},
		RunnerStatusChanged{NodeID: "a", Runner: testRunner("i1", "a", 0, RunnerReady)},
		InstanceUsed{NodeID: "a", InstanceID: "i1", Active: 1},
	} {
		own.Record(ev)
		s = Apply(s, ev)
	}
	if d := own.Diff(s); d != "" {
		t.Fatalf("the state that applied every event differs: %s", d)
	}
	// The other side's state: b's facts only, none of a's.
	other := Apply(New(), NodeIdentityMeasured{NodeID: "b", Identity: NodeIdentity{NodeID: "b"}})
	other = Apply(other, InstanceCreated{NodeID: "b", Instance: inst("ib", "b", "b")})
	d := own.Diff(other)
	for _, want := range []string{"identity", "memory missing", "models", "instance i1 missing"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff %q lacks %q", d, want)
		}
	}
	healed := Apply(other, roundTrip(t, own.Assertion()))
	if d := own.Diff(healed); d != "" {
		t.Fatalf("after the assertion: %s", d)
	}
	in := healed.Instances["i1"]
	if healed.NodeIdentities["a"].FriendlyName != "alpha" || in.Active != 1 || len(in.Ranks) != 2 || healed.Runners["i1-0"].Status != RunnerReady {
		t.Errorf("restored: identity %+v, instance %+v, runners %+v", healed.NodeIdentities["a"], in, healed.Runners)
	}
	if _, ok := healed.Instances["ib"]; !ok || len(healed.NodeIdentities) != 2 {
		t.Error("the assertion touched b's part")
	}
}

// What the owner deleted stays deleted, a failure stays a failure, and
// usage counts in the state (reported by rank 0's node) are kept.
func TestAssertionKeepsDeletionsAndFailures(t *testing.T) {
	own := NewOwned("a")
	s := New()
	for _, ev := range []Event{
		InstanceCreated{NodeID: "a", Instance: inst("gone", "a", "a")},
		RunnerStatusChanged{NodeID: "a", Runner: testRunner("gone", "a", 0, RunnerReady)},
		InstanceCreated{NodeID: "a", Instance: inst("kept", "a", "b", "a")},
		InstanceCreated{NodeID: "a", Instance: inst("bad", "a", "a")},
	} {
		own.Record(ev)
		s = Apply(s, ev)
	}
	stale := s // what a master that missed the next events has
	for _, ev := range []Event{
		InstanceDeleted{NodeID: "a", InstanceID: "gone"},
		InstanceFailed{NodeID: "a", InstanceID: "bad", Error: "rank 0 failed"},
		RunnerStatusChanged{NodeID: "a", Runner: testRunner("gone", "a", 0, RunnerShutdown)},
	} {
		own.Record(ev)
	}
	stale = Apply(stale, InstanceUsed{NodeID: "b", InstanceID: "kept", Active: 3})
	// A runner the state claims on a that a does not run.
	stale.Runners = with(stale.Runners, "kept-1", testRunner("kept", "a", 1, RunnerReady))
	d := own.Diff(stale)
	for _, want := range []string{"instance gone deleted", "instance bad failure", "runner kept-1 not running"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff %q lacks %q", d, want)
		}
	}
	healed := Apply(stale, own.Assertion())
	if _, ok := healed.Instances["gone"]; ok || len(healed.Runners) != 0 {
		t.Errorf("deleted instance or claimed runner back: %+v %+v", healed.Instances, healed.Runners)
	}
	if in := healed.Instances["bad"]; in.Status != InstanceStatusFailed || in.Error != "rank 0 failed" {
		t.Errorf("failure lost: %+v", in)
	}
	if in := healed.Instances["kept"]; in.Active != 3 {
		t.Errorf("usage reported by rank 0's node lost: %+v", in)
	}
	// The state failed an instance the owner still thinks active (its
	// rank's node left): that stays Failed and is no difference.
	failed := Apply(healed, NodeGone{NodeID: "b"})
	if d := own.Diff(failed); d != "" {
		t.Errorf("a failure the owner has not seen yet counts as a difference: %s", d)
	}
	if in := Apply(failed, own.Assertion()).Instances["kept"]; in.Status != InstanceStatusFailed {
		t.Errorf("the assertion revived a failed instance: %+v", in)
	}
}

func TestOwnedIgnoresOtherNodesAndPrunes(t *testing.T) {
	own := NewOwned("a")
	if own.Record(InstanceCreated{NodeID: "b", Instance: inst("x", "b", "b")}) || len(own.Instances()) != 0 {
		t.Error("b's instance recorded in a's record")
	}
	if !own.Record(InstanceCreated{NodeID: "a", Instance: inst("i", "a", "a")}) {
		t.Error("a new instance not reported as a change")
	}
	own.Record(RunnerStatusChanged{NodeID: "a", Runner: testRunner("x", "a", 0, RunnerFailed)})
	own.Prune(New())
	if n := len(own.Assertion().Runners); n != 0 {
		t.Errorf("%d failed runners of a gone instance kept", n)
	}
	if err := own.Restore([]Instance{inst("y", "b", "b")}); err == nil {
		t.Error("restored another node's instance")
	}
	if err := own.Restore([]Instance{inst("y", "a", "a")}); err != nil || len(own.Instances()) != 2 {
		t.Errorf("restore: %v, %d instances", err, len(own.Instances()))
	}
}

func roundTrip(t *testing.T, ev NodeStateAsserted) Event {
	t.Helper()
	b, err := json.Marshal(Indexed{Idx: 1, Event: ev})
	if err != nil {
		t.Fatal(err)
	}
	var ie Indexed
	if err := json.Unmarshal(b, &ie); err != nil {
		t.Fatal(err)
	}
	return ie.Event
}

// Downloads are their node's: kept per node up to a bound, gone with the
// node, and asserted again like the rest.
func TestDownloads(t *testing.T) {
	s := New()
	at := t0
	for i := range MaxFinishedDownloads + 3 {
		at = at.Add(time.Second)
		s = Apply(s, DownloadProgress{NodeID: "a", Download: Download{ID: fmt.Sprint("d", i), Status: DownloadDone, UpdatedAt: at}})
	}
	s = Apply(s, DownloadProgress{NodeID: "a", Download: Download{ID: "run", Status: DownloadRunning, UpdatedAt: t0}})
	s = Apply(s, DownloadProgress{NodeID: "b", Download: Download{ID: "b1", Status: DownloadDone, UpdatedAt: t0}})
	if len(s.Downloads) != MaxFinishedDownloads+2 {
		t.Fatalf("%d downloads kept, want %d finished of a, a running one and b's", len(s.Downloads), MaxFinishedDownloads)
	}
	if _, ok := s.Downloads["d0"]; ok || s.Downloads["run"].NodeID != "a" {
		t.Error("the oldest finished download was kept, or the running one lost its node")
	}
	own := NewOwned("b")
	own.Record(DownloadProgress{NodeID: "b", Download: Download{ID: "b1", Status: DownloadDone, UpdatedAt: t0}})
	lost := Apply(s, NodeGone{NodeID: "b"})
	if _, ok := lost.Downloads["b1"]; ok || own.Diff(lost) != "download b1" {
		t.Fatalf("after b left: %v, diff %q", lost.Downloads["b1"], own.Diff(lost))
	}
	if back := Apply(lost, own.Assertion()); back.Downloads["b1"].Status != DownloadDone {
		t.Error("b's download not asserted back")
	}
}
