// Package replica adapts the node's state store to the cluster layer: it
// applies the indexed events the cluster delivers, keeps the hash history
// used to compare nodes, and publishes local events for sequencing.
package replica

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/wire"
)

// hashRing keeps the state hash at each recent index, so that nodes can be
// compared at the same index while events keep flowing.
const hashRing = 1024

// maxIdx bounds a snapshot's index: no cluster reaches it (a million
// events a second for 146,000 years), and the indices after it must not
// wrap.
const maxIdx = 1 << 62

// Replica adapts the state store to the cluster node: it decodes the opaque
// events the node carries and keeps the hash history. The node serialises
// calls into it.
type Replica struct {
	store *state.Store
	// OnMaster, when set, is called on every master change; OnGone when
	// the master saw a member go; OnRestore after a snapshot replaced the
	// state (with the node's locks held: it must not block or publish).
	// Set them before the node runs.
	OnMaster  func(master string, self bool)
	OnGone    func(id string)
	OnRestore func()

	mu     sync.Mutex // guards hashes and the cached hash
	hashes map[int64]string
	last   string
}

var _ cluster.Application = (*Replica)(nil)

// New returns the replica of store.
func New(store *state.Store) *Replica {
	return &Replica{store: store, hashes: map[int64]string{}}
}

func (r *Replica) LastIdx() int64 { return r.store.State().LastEventAppliedIdx }

func (r *Replica) Apply(evs []wire.IndexedEvent) error {
	for _, e := range evs {
		ev, err := state.DecodeEvent(e.Type, e.Event)
		if err != nil {
			return fmt.Errorf("event %d: %w", e.Idx, err)
		}
		if err := r.store.Apply(state.Indexed{Idx: e.Idx, Event: ev}); err != nil {
			return fmt.Errorf("event %d: %w", e.Idx, err)
		}
		r.noteHash()
	}
	return nil
}

func (r *Replica) noteHash() {
	s := r.store.State()
	h := state.Hash(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hashes[s.LastEventAppliedIdx] = h
	delete(r.hashes, s.LastEventAppliedIdx-hashRing)
	r.last = h
}

// HashAt returns the state hash this node had at idx, if still kept.
func (r *Replica) HashAt(idx int64) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.hashes[idx]
	return h, ok
}

func (r *Replica) EventsSince(since int64, max int) ([]wire.IndexedEvent, bool) {
	evs, err := r.store.Log().Since(since, max)
	if err != nil {
		return nil, false
	}
	out := make([]wire.IndexedEvent, 0, len(evs))
	for _, ie := range evs {
		b, err := json.Marshal(ie.Event)
		if err != nil {
			return nil, false
		}
		out = append(out, wire.IndexedEvent{Idx: ie.Idx, Type: ie.Event.Type(), Event: b})
	}
	return out, true
}

func (r *Replica) Snapshot() (int64, json.RawMessage, error) {
	s := r.store.State()
	b, err := json.Marshal(s)
	return s.LastEventAppliedIdx, b, err
}

func (r *Replica) Restore(lastIdx int64, raw json.RawMessage) error {
	s := state.New()
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	if s.LastEventAppliedIdx != lastIdx {
		return fmt.Errorf("snapshot says idx %d, frame says %d", s.LastEventAppliedIdx, lastIdx)
	}
	if lastIdx < -1 || lastIdx > maxIdx {
		return fmt.Errorf("snapshot at idx %d, want -1..%d", lastIdx, int64(maxIdx))
	}
	if s.NodeIdentities == nil || s.NodeMemory == nil || s.NodeSystem == nil || s.NodeDisk == nil || s.NodeNetwork == nil {
		return errors.New("snapshot lacks a state section")
	}
	if err := s.CheckIDs(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if s.Downloads == nil {
		s.Downloads = map[string]state.Download{} // a snapshot from an agent before pulls
	}
	r.store.Restore(s)
	r.mu.Lock()
	clear(r.hashes)
	r.mu.Unlock()
	r.noteHash()
	if r.OnRestore != nil {
		r.OnRestore()
	}
	return nil
}

func (r *Replica) StateHash() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == "" {
		return state.Hash(r.store.State())
	}
	return r.last
}

func (r *Replica) MasterChanged(master string, self bool) {
	if r.OnMaster != nil {
		r.OnMaster(master, self)
	}
}

func (r *Replica) MemberGone(id string) {
	if r.OnGone != nil {
		r.OnGone(id)
	}
}

// Sequencer publishes local events through the cluster node, which
// indexes them (as master) or forwards them to the master.
type Sequencer struct {
	Node *cluster.Node
}

var _ state.Sequencer = Sequencer{}

// Publish validates ev and hands it to the node.
func (q Sequencer) Publish(ev state.Event) error {
	if err := state.Validate(ev); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("publish %s: %w", ev.Type(), err)
	}
	return q.Node.Publish(wire.RawEvent{Type: ev.Type(), Event: b})
}
