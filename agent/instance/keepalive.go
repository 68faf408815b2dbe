package instance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
)

// Keep-alive, like Ollama's. Requests run on the node of an instance's
// rank 0, so that node counts them (Hold) and unloads the instance once
// it has been idle for its keep-alive (reap); the counts and expiry go
// into the state for /v1/models and the UI.

// firstUseGrace is added to an on-demand instance's first expiry: the
// request that placed it still has to reach rank 0's node and Hold it.
const firstUseGrace = time.Minute

// holds counts the requests running on the instances whose rank 0 is
// here, and the instances being unloaded.
type holds struct {
	mu      sync.Mutex // guards the maps, and orders the InstanceUsed events
	active  map[string]int
	reaping map[string]bool
}

// Hold marks a request running on instanceID until release is called.
func (m *Manager) Hold(instanceID string, keepAlive *api.KeepAlive) (func(), error) {
	// A request routed by another node right after it placed the
	// instance may come before this node's state has it.
	m.waitState(context.Background(), func(s state.State) bool { _, ok := s.Instances[instanceID]; return ok })
	h := &m.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reaping[instanceID] {
		return nil, fmt.Errorf("%w: %s reached the end of its keep-alive as this request came; send it again to load the model anew",
			api.ErrUnloading, instanceID)
	}
	if _, ok := m.cfg.Store.State().Instances[instanceID]; !ok {
		return nil, fmt.Errorf("%w: instance %s is gone", api.ErrModelNotRunning, instanceID)
	}
	if h.active == nil {
		h.active = map[string]int{}
	}
	h.active[instanceID]++
	m.publishUse(state.InstanceUsed{NodeID: m.cfg.Self, InstanceID: instanceID, Active: h.active[instanceID]})
	var once sync.Once
	return func() { once.Do(func() { m.release(instanceID, keepAlive) }) }, nil
}

// release ends a Hold: the last one starts the keep-alive's clock.
func (m *Manager) release(instanceID string, keepAlive *api.KeepAlive) {
	h := &m.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.active[instanceID] - 1
	if n <= 0 {
		n = 0
		delete(h.active, instanceID)
	} else {
		h.active[instanceID] = n
	}
	in, ok := m.cfg.Store.State().Instances[instanceID]
	if !ok {
		return
	}
	ev := state.InstanceUsed{NodeID: m.cfg.Self, InstanceID: instanceID, Active: n}
	pinned, keep := in.Pinned, time.Duration(in.KeepAliveMs)*time.Millisecond
	if keepAlive != nil {
		ms := keepAlive.Ms()
		ev.KeepAliveMs = &ms
		pinned, keep = keepAlive.Pinned(), keepAlive.D
	}
	if n == 0 && !pinned {
		t := time.Now().Add(keep).UTC()
		ev.ExpiresAt = &t
	}
	m.publishUse(ev)
}

func (m *Manager) publishUse(ev state.InstanceUsed) {
	if err := m.cfg.Publish(ev); err != nil {
		m.log.Warn("publish instance use", "instance", ev.InstanceID, "err", err)
	}
}

// reap unloads the instances whose rank 0 is here that have been idle
// past their expiry. A loading instance waits: its expiry is checked once
// every rank is ready.
func (m *Manager) reap(ctx context.Context, st state.State, now time.Time) {
	for id, in := range st.Instances {
		if in.Pinned || in.ExpiresAt == nil || now.Before(*in.ExpiresAt) || len(in.Ranks) == 0 || in.Ranks[0].NodeID != m.cfg.Self {
			continue
		}
		if in.Status != state.InstanceStatusFailed && !ranksReady(st, in) {
			continue
		}
		h := &m.holds
		h.mu.Lock()
		idle := h.active[id] == 0 && !h.reaping[id]
		if idle {
			if h.reaping == nil {
				h.reaping = map[string]bool{}
			}
			h.reaping[id] = true
		}
		h.mu.Unlock()
		if !idle {
			continue
		}
		m.log.Info("unloading idle instance", "instance", id, "model", in.ModelID, "expired", in.ExpiresAt.Format(time.RFC3339))
		go func() {
			m.deleteAnywhere(ctx, in)
			h.mu.Lock()
			delete(h.reaping, id)
			h.mu.Unlock()
		}()
	}
}

func ranksReady(st state.State, in state.Instance) bool {
	for _, rk := range in.Ranks {
		r, ok := st.Runners[supervisor.RunnerID(in.InstanceID, rk.Rank)]
		if !ok || r.Status != state.RunnerReady && r.Status != state.RunnerRunning {
			return false
		}
	}
	return true
}
