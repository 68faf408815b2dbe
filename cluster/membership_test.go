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

func TestElectTerms(t *testing.T) {
	old := Member{NodeID: "m", StartedAt: base}
	w1 := Member{NodeID: "w1", StartedAt: base.Add(time.Second)}
	w2 := Member{NodeID: "w2", StartedAt: base.Add(2 * time.Second)}
	claim := func(m Member, term uint64) Member { m.Follows, m.Term = m.NodeID, term; return m }
	follow := func(m Member, master string, term uint64) Member { m.Follows, m.Term = master, term; return m }
	for _, c := range []struct {
		name    string
		self    string
		members []Member
		master  string
		term    uint64
	}{
		{"a node alone claims no new term", "w1", []Member{follow(w1, "m", 3)}, "w1", 3},
		{"the stale master, back in term 0, follows term 1", "m", []Member{claim(old, 0), claim(w1, 1), follow(w2, "w1", 1)}, "w1", 1},
		{"the new master keeps its term against the stale claim", "w1", []Member{claim(old, 0), claim(w1, 1), follow(w2, "w1", 1)}, "w1", 1},
		{"equal terms: the longest-running claim wins", "w1", []Member{claim(old, 2), claim(w1, 2), follow(w2, "w1", 2)}, "m", 2},
		{"a worker back from a cut, alone in its term, does not take over", "w2", []Member{claim(w1, 4), follow(old, "w1", 4), claim(w2, 4)}, "w1", 4},
		{"master gone: the longest-running survivor claims above every term seen", "w1", []Member{follow(w1, "m", 3), follow(w2, "m", 4)}, "w1", 5},
		{"master gone: others follow the survivor, keeping their term until it claims", "w2", []Member{follow(w1, "m", 3), follow(w2, "m", 3)}, "w1", 3},
		{"a member not yet heard from claims nothing", "w2", []Member{w1, follow(w2, "w2", 0)}, "w2", 0},
	} {
		master, term := Elect(c.self, c.members)
		if master != c.master || term != c.term {
			t.Errorf("%s: Elect = %s in term %d, want %s in term %d", c.name, master, term, c.master, c.term)
		}
	}
}

// After this node was paused, its members get fail-after from its wake:
// none is swept for the silence the pause made.
func TestForgiveAfterPause(t *testing.T) {
	t0 := time.Now()
	tb := NewTable(Member{NodeID: "self", StartedAt: t0}, 3*time.Second)
	tb.Heard("a", t0, t0)
	tb.Heard("b", t0, t0.Add(time.Second))
	wake := t0.Add(10 * time.Second)
	tb.Forgive(wake)
	if gone := tb.Sweep(wake.Add(time.Second)); len(gone) != 0 {
		t.Fatalf("swept %v right after the pause", gone)
	}
	if gone := tb.Sweep(wake.Add(4 * time.Second)); len(gone) != 2 {
		t.Fatalf("swept %v fail-after past the wake, want both still silent members", gone)
	}
}
