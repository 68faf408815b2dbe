package instance

import (
	"context"
	"fmt"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/split"
)

// placeTensor places the model as one tensor-parallel group, or as a
// pipeline of P stages each a group of T ({"pipeline": P, "tensor": T}):
// on the nodes the request names, in order (stage s on nodes
// [s*T, (s+1)*T): name the nodes of a fast link together), or on the
// candidates with the most memory (every candidate for "tensor"). Each
// node holds a slice of every block of its stage (split.PlanTP); rank 0,
// on the first node, serves.
func (m *Manager) placeTensor(ctx context.Context, req api.PlaceRequest, ml modelLayout, existed *bool) (state.Instance, error) {
	p := req.Parallelism
	bad := func(format string, a ...any) (state.Instance, error) {
		return state.Instance{}, fmt.Errorf("%w: "+format, append([]any{runnerapi.ErrBadRequest}, a...)...)
	}
	if len(req.Ranks) > 0 || req.Node != "" {
		return bad("a tensor-parallel group takes nodes (or none), not ranks or one node")
	}
	nodes, err := m.candidates(req.Model, req.Nodes, req.GPULayers)
	if err != nil {
		return state.Instance{}, err
	}
	sh, err := p.Shape(len(nodes))
	switch {
	case len(req.Nodes) == 0 && err == nil && sh.Ranks() > len(nodes):
		return bad("%s (%d ranks) on a cluster of %d nodes", sh, sh.Ranks(), len(nodes))
	case len(req.Nodes) == 0 && err == nil:
		nodes = nodes[:sh.Ranks()]
	case err == nil && sh.Ranks() != len(nodes):
		return bad("%s (%d ranks) on %d nodes named", sh, sh.Ranks(), len(nodes))
	}
	if err != nil {
		return bad("%v", err)
	}
	plan, err := split.PlanTP(ml.file, ml.cfg, sh.Tensor)
	if err != nil {
		return bad("%v", err)
	}
	var ranks []placement.Rank
	if sh.Pipeline > 1 {
		ranks, err = placement.Hybrid(ml.layout, plan, nodes, sh.Pipeline)
	} else {
		ranks, err = placement.Tensor(ml.layout, plan, nodes)
	}
	if err != nil {
		return state.Instance{}, placeErr(err)
	}
	return m.create(ctx, req, ml, ranks, sh, existed)
}
