package instance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A draft model's memory is rank 0's: counted in its need, and a rank 0
// that no longer fits its node with it is refused, naming the bytes.
func TestAddDraft(t *testing.T) {
	ranks := []placement.Rank{{Rank: 0, NodeID: "a", Need: 100, Available: 1000}, {Rank: 1, NodeID: "b", Need: 100, Available: 1000}}
	if err := addDraft(ranks, "d", 50); err != nil || ranks[0].Need != 150 || ranks[1].Need != 100 {
		t.Fatalf("addDraft: %v, needs %d and %d", err, ranks[0].Need, ranks[1].Need)
	}
	err := addDraft(ranks, "d", 900)
	if !errors.Is(err, api.ErrNoMemory) || !strings.Contains(err.Error(), `needs 1050 bytes with draft model "d" (900 of them), and the node has 1000 available`) {
		t.Errorf("a draft that does not fit: %v", err)
	}
	unknown := []placement.Rank{{NodeID: "a", Need: 100}} // memory not known: counted, not refused
	if err := addDraft(unknown, "d", 1<<40); err != nil || unknown[0].Need != 100+1<<40 {
		t.Errorf("unknown memory: %v %d", err, unknown[0].Need)
	}
}

// TestReplaceKeepsDraft: a failed instance is replaced on the same nodes
// as it was placed, with its draft model and default speculation.
func TestReplaceKeepsDraft(t *testing.T) {
	m, seq := oneNode(t)
	ctx := context.Background()
	sp := &runnerapi.Speculation{Draft: "tiny", Max: 3}
	in, _, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", DraftModel: "tiny", Speculative: sp})
	if err != nil {
		t.Fatal(err)
	}
	if err := seq.Publish(state.InstanceFailed{NodeID: "n1", InstanceID: in.InstanceID, Error: "rank 0 failed"}); err != nil {
		t.Fatal(err)
	}
	id, _, err := m.Route(ctx, "tiny", nil)
	if err != nil || id == in.InstanceID {
		t.Fatalf("Route after the failure: %s, %v; want a new instance", id, err)
	}
	got := m.cfg.Store.State().Instances[id]
	if got.DraftModel != "tiny" || !runnerapi.SameSpeculation(got.Speculative, sp) {
		t.Errorf("the replacement: draft %q, speculation %+v; want %q and %+v", got.DraftModel, got.Speculative, "tiny", sp)
	}
	if _, ok := m.cfg.Store.State().Instances[in.InstanceID]; ok {
		t.Error("the failed instance is still there")
	}
}
