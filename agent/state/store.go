package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// Store is a node's view of the cluster: the current State, the event log it
// came from and the memory history derived from it. Safe for concurrent use.
type Store struct {
	log     *Log
	history *MemoryHistory
	system  *SystemHistory
	cur     atomic.Pointer[State]

	mu sync.Mutex // serialises Apply so log and state advance together
}

// NewStore returns a store at the empty state.
func NewStore(log *Log, history *MemoryHistory) *Store {
	st := &Store{log: log, history: history, system: NewSystemHistory(DefaultHistoryWindow)}
	s := New()
	st.cur.Store(&s)
	return st
}

// State returns the current state. The value must not be modified.
func (st *Store) State() State { return *st.cur.Load() }

// Log returns the store's event log.
func (st *Store) Log() *Log { return st.log }

// History returns the memory history.
func (st *Store) History() *MemoryHistory { return st.history }

// System returns the CPU/GPU/temperature/power history.
func (st *Store) System() *SystemHistory { return st.system }

// Apply folds the next indexed event into the state and appends it to the
// log. An out-of-order event is refused and changes nothing.
func (st *Store) Apply(ie Indexed) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	next, err := ApplyIndexed(*st.cur.Load(), ie)
	if err != nil {
		return err
	}
	if want := st.log.Next(); ie.Idx != want {
		return fmt.Errorf("store: %w: append %d, want %d", ErrOutOfOrder, ie.Idx, want)
	}
	// The state first, then the log, whose Append wakes its waiters: a
	// waiter that sees the log move must find the event in the state, or
	// it takes the new Next and sleeps until some later event.
	st.cur.Store(&next)
	if err := st.log.Append(ie); err != nil {
		return fmt.Errorf("store: %w", err) // cannot happen: only Apply appends, under st.mu
	}
	switch m := ie.Event.(type) {
	case NodeMemoryMeasured:
		st.history.Add(m.NodeID, m.Memory)
	case NodeSystemMeasured:
		st.system.Add(m.NodeID, m.System)
	}
	return nil
}

// Restore replaces the state with s (a master's snapshot) and restarts the
// log after it. Readers of older events get ErrCompacted and resync.
func (st *Store) Restore(s State) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.cur.Store(&s) // before the log wakes its waiters, as in Apply
	st.log.Reset(s.LastEventAppliedIdx + 1)
}

// Hash is a digest of s: sha256 of its JSON (map keys sorted by
// encoding/json), hex. Nodes at the same index have the same hash.
func Hash(s State) string {
	b, err := json.Marshal(s)
	if err != nil {
		return "error:" + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Validate checks an event before it enters the log: valid ids (its
// node's, and those DecodeEvent checks), and a payload JSON can carry (no
// NaN or ±Inf), since every reader of the log must be able to encode it.
func Validate(ev Event) error {
	if err := ident.ValidNodeID(ev.Node()); err != nil {
		return fmt.Errorf("%s: %w", ev.Type(), err)
	}
	if err := checkIDs(ev); err != nil {
		return fmt.Errorf("%s: %w", ev.Type(), err)
	}
	if _, err := json.Marshal(ev); err != nil {
		return fmt.Errorf("%s: %w", ev.Type(), err)
	}
	return nil
}

// Sequencer gives local events their global index. In a single-node agent
// the node is its own master and LocalSequencer does it; the cluster layer
// replaces it with one that forwards to the elected master.
type Sequencer interface {
	// Publish submits a local event. It must not block for long: samplers
	// call it on their tick.
	Publish(ev Event) error
}

// LocalSequencer indexes events itself and applies them to its store.
type LocalSequencer struct {
	Store *Store
	mu    sync.Mutex // makes "take next index, apply" atomic
}

var _ Sequencer = (*LocalSequencer)(nil)

// Publish indexes ev and applies it.
func (q *LocalSequencer) Publish(ev Event) error {
	if err := Validate(ev); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.Store.Apply(Indexed{Idx: q.Store.Log().Next(), Event: ev})
}
