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

// placeTensor places the model as one tensor-parallel group, or as a
// pipeline of P stages each a group of T ({"pipeline": P, "tensor": T}):
// on the nodes the request names, in order (stage s on nodes
// [s*T, (s+1)*T): name the nodes of a fast link together), or on the
// candidates with the most memory (every candidate for "tensor"). Each
// node holds a slice of every block of its stage (model.PlanTP); rank 0,
// on the first node, serves.
func (m *Manager) placeTensor(ctx context.Context, req api.PlaceRequest, ml modelLayout, existed *bool) (state.Instance, error) {
	p := req.Parallelism
	bad := func(format string, a ...any) (state.Instance, error) {
		return state.Instance{}, fmt.Errorf("%w: "+format, append([]any{runner.ErrBadRequest}, a...)...)
	}
	if len(req.Ranks) > 0 || req.Node != "" {
		return bad("a tensor-parallel group takes nodes (or none), not ranks or one node")
	}
	nodes, err := m.candidates(req.Model, req.Nodes)
	if err != nil {
		return state.Instance{}, err
	}
	stages := max(p.Pipeline, 1)
	t := len(nodes) / stages
	if p.Tensor > 1 {
		t = p.Tensor
	}
	switch {
	case len(req.Nodes) == 0 && stages*t > len(nodes):
		return bad("%s on a cluster of %d nodes", planName(stages, t), len(nodes))
	case len(req.Nodes) == 0:
		nodes = nodes[:stages*t]
	case stages*t != len(nodes):
		return bad("%s on %d nodes named", planName(stages, t), len(nodes))
	}
	if t < 2 {
		return bad("a tensor-parallel group needs 2 nodes or more; this cluster offers %d", len(nodes)/stages)
	}
	plan, err := model.PlanTP(ml.file, ml.cfg, t)
	if err != nil {
		return bad("%v", err)
	}
	var ranks []placement.Rank
	if stages > 1 {
		ranks, err = placement.Hybrid(ml.layout, plan, nodes, stages)
	} else {
		ranks, err = placement.Tensor(ml.layout, plan, nodes)
	}
	if err != nil {
		return state.Instance{}, placeErr(err)
	}
	return m.create(ctx, req, ml, ranks, t, existed)
}

// planName says a plan of stages pipeline stages of tensor ranks each.
func planName(stages, tensor int) string {
	if stages > 1 {
		return fmt.Sprintf("pipeline %d × tensor %d (%d ranks)", stages, tensor, stages*tensor)
	}
	return fmt.Sprintf("a tensor-parallel group of %d", tensor)
}
