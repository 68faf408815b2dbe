package instance

import (
	"fmt"

	"github.com/orrery-cluster/orrery/engine/runner"
)

// checkDraft refuses a draft model (id; "" for none) that node, where the
// instance's rank 0 runs and loads it, does not list as one it can serve.
// Its vocabulary is checked against the model's when rank 0 loads it.
func (m *Manager) checkDraft(id, node string) error {
	if id == "" {
		return nil
	}
	for _, mi := range m.cfg.Store.State().NodeModels[node].Models {
		if mi.ID != id {
			continue
		}
		if mi.Error != "" {
			return fmt.Errorf("%w: draft model %q cannot run on node %s: %s", runner.ErrBadRequest, id, node, mi.Error)
		}
		return nil
	}
	return fmt.Errorf("%w: draft model %q is not on node %s, where rank 0 runs and would load it", runner.ErrBadRequest, id, node)
}
