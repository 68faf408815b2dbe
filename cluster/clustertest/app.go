package clustertest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/wire"
)

// App is an in-memory cluster.Application, a fake of the agent's store:
// its state is the hash chain of the events applied. Safe for concurrent
// use.
type App struct {
	mu      sync.Mutex // guards the fields below
	evs     []wire.IndexedEvent
	base    int64 // idx of evs[0]; after Restore the list restarts
	hashAcc string
	gone    []string
	masters []string
}

var _ cluster.Application = (*App)(nil)

func (a *App) LastIdx() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.base + int64(len(a.evs)) - 1
}

func (a *App) Apply(evs []wire.IndexedEvent) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range evs {
		if want := a.base + int64(len(a.evs)); e.Idx != want {
			return fmt.Errorf("got %d want %d", e.Idx, want)
		}
		a.evs = append(a.evs, e)
		sum := sha256.Sum256([]byte(a.hashAcc + e.Type + string(e.Event)))
		a.hashAcc = hex.EncodeToString(sum[:])
	}
	return nil
}

func (a *App) EventsSince(since int64, max int) ([]wire.IndexedEvent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if since < a.base {
		return nil, false
	}
	i := since - a.base
	if i >= int64(len(a.evs)) {
		return nil, true
	}
	out := a.evs[i:]
	if len(out) > max {
		out = out[:max]
	}
	return slices.Clone(out), true
}

type snap struct {
	Hash string `json:"hash"`
}

func (a *App) Snapshot() (int64, json.RawMessage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, err := json.Marshal(snap{a.hashAcc})
	return a.base + int64(len(a.evs)) - 1, b, err
}

func (a *App) Restore(idx int64, raw json.RawMessage) error {
	var s snap
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs, a.base, a.hashAcc = nil, idx+1, s.Hash
	return nil
}

func (a *App) StateHash() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hashAcc
}

func (a *App) MasterChanged(m string, self bool) {
	a.mu.Lock()
	a.masters = append(a.masters, m)
	a.mu.Unlock()
}

func (a *App) MemberGone(id string) {
	a.mu.Lock()
	a.gone = append(a.gone, id)
	a.mu.Unlock()
}

// Gone lists the members MemberGone was told of, in order.
func (a *App) Gone() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.gone)
}

// Masters lists the masters MasterChanged was told of, in order.
func (a *App) Masters() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.masters)
}
