package instance

import (
	"fmt"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
)

// failedGrace is how long the owner of an instance waits after a rank
// first shows Failed before naming the cause: the ranks whose links broke
// fail a moment after the one that died.
const failedGrace = 500 * time.Millisecond

// watchFailures marks this node's instances Failed when a rank failed,
// naming the rank that failed first for a reason other than a lost link
// (of a pipeline or a tensor-parallel group).
func (m *Manager) watchFailures(st state.State) {
	for id, in := range st.Instances {
		if in.NodeID != m.cfg.Self || in.Status == state.InstanceStatusFailed {
			continue
		}
		var failed []state.Runner
		for _, rk := range in.Ranks {
			if r, ok := st.Runners[supervisor.RunnerID(id, rk.Rank)]; ok && r.Status == state.RunnerFailed {
				failed = append(failed, r)
			}
		}
		if len(failed) == 0 {
			continue
		}
		m.failMu.Lock()
		first, seen := m.failSeen[id]
		if !seen {
			m.failSeen[id] = time.Now()
			first = time.Now()
		}
		m.failMu.Unlock()
		if time.Since(first) < failedGrace && len(failed) < len(in.Ranks) {
			continue // more may come; reconcile runs again within a second
		}
		cause := failed[0]
		for _, r := range failed {
			// A rank whose pipeline or group link broke ("rank link
			// lost", "tensor-parallel link lost", "pipeline broke",
			// "group … broke") is not the cause.
			if !strings.Contains(r.Error, "link lost") && !strings.Contains(r.Error, " broke") {
				cause = r
				break
			}
		}
		msg := fmt.Sprintf("rank %d (node %s) failed: %s", cause.Rank, m.nodeName(st, cause.NodeID), cause.Error)
		if err := m.cfg.Publish(state.InstanceFailed{NodeID: m.cfg.Self, InstanceID: id, Error: truncate(msg, 2048)}); err != nil {
			m.log.Warn("publish instance failure", "instance", id, "err", err)
		} else {
			m.log.Warn("instance failed", "instance", id, "err", msg)
		}
	}
	m.failMu.Lock()
	for id := range m.failSeen {
		if in, ok := st.Instances[id]; !ok || in.Status == state.InstanceStatusFailed {
			delete(m.failSeen, id)
		}
	}
	m.failMu.Unlock()
}

func (m *Manager) nodeName(st state.State, id string) string {
	if ident, ok := st.NodeIdentities[id]; ok && ident.FriendlyName != "" {
		return fmt.Sprintf("%s, %.8s", ident.FriendlyName, id)
	}
	return id
}
