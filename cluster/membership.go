package cluster

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultFailAfter is how long a member may stay silent before it is marked
// gone. With heartbeats every second, a dead node is gone within 3–4 s,
// inside the 5 s the product promises.
const DefaultFailAfter = 3 * time.Second

// Member is one node as this node sees it.
type Member struct {
	NodeID string `json:"nodeId"`
	// StartedAt is when the member's agent started, by its own clock; the
	// election prefers the longest-running member.
	StartedAt time.Time `json:"startedAt"`
	LastHeard time.Time `json:"lastHeard"`
	Self      bool      `json:"self"`
	// Follows is the master the member last announced it follows (itself
	// when it is the master), in election term Term. Empty until its
	// first heartbeat.
	Follows string `json:"follows,omitempty"`
	Term    uint64 `json:"term,omitempty"`
}

// claims reports whether m announced itself master.
func (m Member) claims() bool { return m.Follows != "" && m.Follows == m.NodeID }

// Table tracks the members heard from recently. Safe for concurrent use.
type Table struct {
	failAfter time.Duration
	self      Member

	mu      sync.Mutex // guards members
	members map[string]Member
}

// NewTable starts a table holding only this node.
func NewTable(self Member, failAfter time.Duration) *Table {
	if failAfter <= 0 {
		failAfter = DefaultFailAfter
	}
	self.Self = true
	return &Table{failAfter: failAfter, self: self, members: map[string]Member{}}
}

// Heard records a sign of life from a member. It reports whether the
// member is new (or restarted: a new StartedAt).
func (t *Table) Heard(id string, startedAt, now time.Time) (joined bool) {
	if id == t.self.NodeID {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.members[id]
	joined = !ok || !old.StartedAt.Equal(startedAt)
	m := Member{NodeID: id, StartedAt: startedAt, LastHeard: now}
	if !joined {
		m.Follows, m.Term = old.Follows, old.Term // a restart forgets them
	}
	t.members[id] = m
	return joined
}

// Announced records a member's heartbeat: a sign of life with the master
// it follows and that master's term.
func (t *Table) Announced(id string, startedAt, now time.Time, follows string, term uint64) (joined bool) {
	if id == t.self.NodeID {
		return false
	}
	joined = t.Heard(id, startedAt, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.members[id]
	m.Follows, m.Term = follows, term
	t.members[id] = m
	return joined
}

// Forgive counts every member as heard at now: this node was paused (see
// Node.tick), so their silence meanwhile says nothing about them.
func (t *Table) Forgive(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, m := range t.members {
		if m.LastHeard.Before(now) {
			m.LastHeard = now
			t.members[id] = m
		}
	}
}

// Sweep removes members silent for longer than the fail-after time and
// returns their ids, sorted.
func (t *Table) Sweep(now time.Time) (gone []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, m := range t.members {
		if now.Sub(m.LastHeard) > t.failAfter {
			delete(t.members, id)
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	return gone
}

// Has reports whether id is this node or a member not yet swept.
func (t *Table) Has(id string) bool {
	if id == t.self.NodeID {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.members[id]
	return ok
}

// Alive returns this node and every member not yet swept, sorted by id.
func (t *Table) Alive() []Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Member, 0, len(t.members)+1)
	out = append(out, t.self)
	for _, m := range t.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// Elect decides the master self follows, and its term, from the members
// alive (self included, with the master and term it follows now).
//
// Terms make a stale master step down: a member that announces itself
// master (a claim) in the highest term is followed, ties broken by
// ElectMaster's rule, so a master that was frozen or cut off, and comes
// back still claiming its old term, loses to the one elected meanwhile.
// With no claim alive (the master is gone, or the cluster is new),
// ElectMaster's choice is followed; when that is self and another member
// is alive, it claims a term above every term it has seen, which outranks
// the lost master's. A node left alone claims no new term (as Raft's
// pre-vote, it could not win one): a worker cut off for a while comes
// back in the cluster's term, where the master, the longest-running of
// those that elected it, wins the tie.
func Elect(self string, members []Member) (master string, term uint64) {
	var best *Member
	var seen uint64
	for i, m := range members {
		seen = max(seen, m.Term)
		if !m.claims() {
			continue
		}
		if best == nil || m.Term > best.Term || m.Term == best.Term && older(m, *best) {
			best = &members[i]
		}
	}
	if best != nil {
		return best.NodeID, best.Term
	}
	cand := ElectMaster(members)
	switch {
	case cand == self && len(members) > 1:
		return self, seen + 1
	case cand == self:
		return self, seen
	}
	for _, m := range members {
		if m.NodeID == self {
			return cand, m.Term // follow cand once it claims; keep our term
		}
	}
	return cand, seen
}

// older reports whether a wins ElectMaster's rule against b.
func older(a, b Member) bool {
	return a.StartedAt.Before(b.StartedAt) || a.StartedAt.Equal(b.StartedAt) && a.NodeID < b.NodeID
}

// ElectMaster picks the master among members: the longest-running one
// (earliest StartedAt), ties broken by the smaller node id. A node that
// joins later never displaces the master, so the choice does not flap; a
// restarted master comes back with a new StartedAt and stays a worker.
func ElectMaster(members []Member) string {
	best := -1
	for i, m := range members {
		if best < 0 || older(m, members[best]) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return members[best].NodeID
}
