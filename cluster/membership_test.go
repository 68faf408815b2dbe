package cluster

import (
	"reflect"
	"testing"
	"time"
)

var base = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func ids(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.NodeID
	}
	return out
}

func TestTableJoinSweepRejoin(t *testing.T) {
	tb := NewTable(Member{NodeID: "b", StartedAt: base}, 3*time.Second)
	if !tb.Heard("a", base.Add(time.Second), base) {
		t.Error("first contact not reported as a join")
	}
	if tb.Heard("a", base.Add(time.Second), base.Add(time.Second)) {
		t.Error("a heartbeat from a known member reported as a join")
	}
	if tb.Heard("b", base, base) {
		t.Error("hearing ourselves counted as a join")
	}
	tb.Heard("c", base, base.Add(2*time.Second))
	if got := ids(tb.Alive()); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("alive = %v", got)
	}
	// a last heard at 1 s, c at 2 s; at 4.5 s only a is past 3 s.
	if gone := tb.Sweep(base.Add(4500 * time.Millisecond)); !reflect.DeepEqual(gone, []string{"a"}) {
		t.Errorf("gone = %v, want [a]", gone)
	}
	if got := ids(tb.Alive()); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Errorf("alive after sweep = %v", got)
	}
	// A restart (new StartedAt) is a join even if the old entry is alive.
	if !tb.Heard("c", base.Add(10*time.Second), base.Add(5*time.Second)) {
		t.Error("restart with a new StartedAt not reported as a join")
	}
}

func TestElectMasterStable(t *testing.T) {
	m := []Member{
		{NodeID: "z", StartedAt: base},
		{NodeID: "a", StartedAt: base.Add(time.Minute)},
	}
	if got := ElectMaster(m); got != "z" {
		t.Errorf("master = %s, want the longest-running z", got)
	}
	// A newcomer, even with a smaller id, does not take over.
	m = append(m, Member{NodeID: "0", StartedAt: base.Add(time.Hour)})
	if got := ElectMaster(m); got != "z" {
		t.Errorf("after a join master = %s, want z", got)
	}
	// Ties go to the smaller id, in any input order.
	tie := []Member{{NodeID: "q", StartedAt: base}, {NodeID: "p", StartedAt: base}}
	if ElectMaster(tie) != "p" || ElectMaster([]Member{tie[1], tie[0]}) != "p" {
		t.Error("tie not broken by the smaller id")
	}
	// Master gone: the next-longest-running takes over.
	if got := ElectMaster(m[1:]); got != "a" {
		t.Errorf("after master loss = %s, want a", got)
	}
	if ElectMaster(nil) != "" {
		t.Error("a master elected from no members")
	}
}
