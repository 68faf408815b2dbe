package replica

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster/wire"
)

func newReplica() *Replica {
	return New(state.NewStore(state.NewLog(64), state.NewMemoryHistory(time.Minute)))
}

// A master's snapshot comes off the wire whole. Whatever its bytes, Restore
// takes it or refuses it with an error; one it takes has only valid ids,
// goes on applying events, and passes on to another node (Snapshot, then
// Restore) with the same hash.
func FuzzRestore(f *testing.F) {
	src := newReplica()
	evs := []state.Event{
		state.NodeMemoryMeasured{NodeID: "a"},
		state.InstanceCreated{NodeID: "a", Instance: state.Instance{InstanceID: "i", NodeID: "a", Ranks: []state.ShardRange{{NodeID: "b"}}}},
		state.RunnerStatusChanged{NodeID: "b", Runner: state.Runner{RunnerID: "i-0", InstanceID: "i", NodeID: "b"}},
	}
	for i, ev := range evs {
		b, _ := json.Marshal(ev)
		if err := src.Apply([]wire.IndexedEvent{{Idx: int64(i), Type: ev.Type(), Event: b}}); err != nil {
			f.Fatal(err)
		}
	}
	idx, snap, err := src.Snapshot()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(idx, []byte(snap))
	f.Add(int64(math.MaxInt64), []byte(`{"lastEventAppliedIdx":9223372036854775807,"nodeIdentities":{},"nodeMemory":{},"nodeSystem":{},"nodeDisk":{},"nodeNetwork":{}}`))
	f.Add(int64(-1), []byte(`{"lastEventAppliedIdx":-1,"nodeIdentities":{},"nodeMemory":{},"nodeSystem":{},"nodeDisk":{},"nodeNetwork":{}}`))
	f.Add(int64(0), []byte(`{"lastEventAppliedIdx":0,"nodeIdentities":{"../x":{}},"nodeMemory":{},"nodeSystem":{},"nodeDisk":{},"nodeNetwork":{}}`))
	f.Add(int64(0), []byte(`{"lastEventAppliedIdx":0,"nodeIdentities":{},"nodeMemory":{},"nodeSystem":{},"nodeDisk":{},"nodeNetwork":{},"instances":{"i":{"instanceId":"i/..","nodeId":"a"}}}`))
	next := []state.Event{
		state.InstanceUsed{NodeID: "b", InstanceID: "i", Active: 1},
		state.NodeGone{NodeID: "b"},
		state.NodeLinksMeasured{NodeID: "a"},
		state.InstanceDeleted{NodeID: "a", InstanceID: "i"},
	}
	f.Fuzz(func(t *testing.T, idx int64, raw []byte) {
		r := newReplica()
		if err := r.Restore(idx, raw); err != nil {
			return
		}
		if err := r.store.State().CheckIDs(); err != nil {
			t.Fatalf("restored a state with a bad id: %v", err)
		}
		at, snap, err := r.Snapshot()
		if err != nil {
			t.Fatalf("snapshot of a restored state: %v", err)
		}
		r2 := newReplica()
		if err := r2.Restore(at, snap); err != nil || r2.StateHash() != r.StateHash() {
			t.Fatalf("passed on, the snapshot gives %v, hash %s for %s", err, r2.StateHash(), r.StateHash())
		}
		for i, ev := range next {
			b, _ := json.Marshal(ev)
			if err := r.Apply([]wire.IndexedEvent{{Idx: at + 1 + int64(i), Type: ev.Type(), Event: b}}); err != nil {
				t.Fatalf("event %d after a restored state: %v", i, err)
			}
		}
	})
}
