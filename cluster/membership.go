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
}

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
	t.members[id] = Member{NodeID: id, StartedAt: startedAt, LastHeard: now}
	return !ok || !old.StartedAt.Equal(startedAt)
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

// ElectMaster picks the master among members: the longest-running one
// (earliest StartedAt), ties broken by the smaller node id. A node that
// joins later never displaces the master, so the choice does not flap; a
// restarted master comes back with a new StartedAt and stays a worker.
func ElectMaster(members []Member) string {
	best := -1
	for i, m := range members {
		if best < 0 || m.StartedAt.Before(members[best].StartedAt) ||
			m.StartedAt.Equal(members[best].StartedAt) && m.NodeID < members[best].NodeID {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return members[best].NodeID
}
