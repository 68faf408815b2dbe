package instance

import (
	"context"
	"fmt"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/gguf"
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
	case ml.path == "":
		return bad("tensor-parallel slices are cut on a node that has %s: pull it to one first", req.Model)
	}
	f, err := gguf.ReadFile(ml.path)
	if err != nil {
		return state.Instance{}, err
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return state.Instance{}, err
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
	plan, err := model.PlanTP(f, cfg, t)
	if err != nil {
		return bad("%v", err)
	}
	if err := tensorFits(ml.layout, plan, nodes); err != nil {
		return state.Instance{}, err
	}
	ranks := make([]placement.Rank, t)
	for i, n := range nodes {
		ranks[i] = placement.Rank{Rank: i, NodeID: n.ID, FirstLayer: 0, LastLayer: cfg.Layers}
	}
	return m.create(ctx, req, ml, ranks, t, existed)
}

// tensorFits checks each node's memory for its slice: its share of the
// blocks' weights (the larger of its heads' and its MLP columns' share)
// and of the KV cache (its kv heads'), the embeddings, and on rank 0 the
// output head.
func tensorFits(l placement.Layout, plan []model.TPSlice, nodes []placement.Node) error {
	var blocks, kv uint64
	for i := range l.Block {
		blocks += l.Block[i]
		kv += l.KV[i]
	}
	for i, s := range plan {
		share := max(float64(s.Heads)/float64(s.FullHeads), float64(s.FFDim)/float64(s.FullFF))
		need := uint64(float64(blocks)*share) + kv*uint64(s.KVHeads)/uint64(s.FullKVHeads) + l.Embed
		if i == 0 {
			need += l.Head
		}
		if n := nodes[i]; n.Available < need {
			return fmt.Errorf("%w: rank %d of the tensor-parallel group needs %s on node %s, which has %s available",
				api.ErrNoMemory, i, human(need), n.ID, human(n.Available))
		}
	}
	return nil
}

func human(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
