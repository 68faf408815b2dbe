package instance

import (
	"context"
	"fmt"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runner"
)

// placeTensor places the model as one tensor-parallel group: on the nodes
// the request names, or on the T candidates with the most memory (every
// candidate for "tensor"). Each node holds a slice of every block
// (model.PlanTP); rank 0, on the first node, serves.
func (m *Manager) placeTensor(ctx context.Context, req api.PlaceRequest, ml modelLayout, existed *bool) (state.Instance, error) {
	p := req.Parallelism
	bad := func(format string, a ...any) (state.Instance, error) {
		return state.Instance{}, fmt.Errorf("%w: "+format, append([]any{runner.ErrBadRequest}, a...)...)
	}
	switch {
	case len(req.Ranks) > 0 || req.Node != "":
		return bad("a tensor-parallel group takes nodes (or none), not ranks or one node")
	case p.Pipeline > 1:
		return bad("a pipeline of %d tensor-parallel groups is not built yet: one group, or a pipeline", p.Pipeline)
	}
	nodes, err := m.candidates(req.Model, req.Nodes)
	if err != nil {
		return state.Instance{}, err
	}
	t := len(nodes)
	if len(req.Nodes) == 0 && p.Tensor > 1 {
		if p.Tensor > len(nodes) {
			return bad("a tensor-parallel group of %d on a cluster of %d nodes", p.Tensor, len(nodes))
		}
		t, nodes = p.Tensor, nodes[:p.Tensor]
	}
	switch {
	case p.Tensor > 1 && p.Tensor != t:
		return bad("tensor %d on %d nodes named", p.Tensor, t)
	case t < 2:
		return bad("a tensor-parallel group needs 2 nodes or more; this cluster offers %d", t)
	}
	plan, err := model.PlanTP(ml.file, ml.cfg, t)
	if err != nil {
		return bad("%v", err)
	}
	ranks, err := placement.Tensor(ml.layout, plan, nodes)
	if err != nil {
		return state.Instance{}, placeErr(err)
	}
	return m.create(ctx, req, ml, ranks, t, existed)
}
