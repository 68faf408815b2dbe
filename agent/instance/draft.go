package instance

import (
	"context"
	"fmt"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// draftNeed refuses a draft model (id; "" for none) that node, where the
// instance's rank 0 runs and loads it, does not list as one it can serve,
// and returns the memory it adds to rank 0: its weights and KV cache when
// the file is on this node (its layout), else its file's size. Its
// vocabulary is checked against the model's when rank 0 loads it.
func (m *Manager) draftNeed(ctx context.Context, id, node string) (uint64, error) {
	if id == "" {
		return 0, nil
	}
	for _, mi := range m.cfg.Store.State().NodeModels[node].Models {
		if mi.ID != id {
			continue
		}
		if mi.Error != "" {
			return 0, fmt.Errorf("%w: draft model %q cannot run on node %s: %s", runnerapi.ErrBadRequest, id, node, mi.Error)
		}
		if _, ok := m.cfg.Models.Find(id); ok {
			if dl, err := m.layout(ctx, id); err == nil {
				// It runs inside rank 0's runner: no second overhead.
				return dl.layout.Need(0, dl.layout.Layers) - placement.Overhead, nil
			}
		}
		if mi.Size != nil {
			return mi.Size.InBytes, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%w: draft model %q is not on node %s, where rank 0 runs and would load it", runnerapi.ErrBadRequest, id, node)
}

// addDraft counts the draft's need in rank 0's, and refuses a placement
// whose rank 0 no longer fits its node with it (the split is not redone).
func addDraft(ranks []placement.Rank, id string, need uint64) error {
	r := &ranks[0]
	r.Need += need
	if need > 0 && r.Available > 0 && r.Need > r.Available {
		return fmt.Errorf("%w: rank 0 on node %s needs %d bytes with draft model %q (%d of them), and the node has %d available",
			api.ErrNoMemory, r.NodeID, r.Need, id, need, r.Available)
	}
	return nil
}
