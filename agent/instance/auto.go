package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runner"
)

// The cost model's operating point: decode after a prompt of
// predictPrompt tokens, and that prompt's prefill.
const predictPrompt = 512

// assumedLinkMbps stands in for a link whose interface reports no speed.
const assumedLinkMbps = 1000

// costInputs are the cluster's measurements as the cost model takes them:
// each node's speed (from its identity) and each link's one-way latency
// (half the smallest measured round trip: the floor a small message
// pays) and capacity.
func (m *Manager) costInputs(st state.State) placement.Inputs {
	speeds := map[string]backend.Speed{}
	for id, ni := range st.NodeIdentities {
		if ni.Speed != nil {
			speeds[id] = *ni.Speed
		}
	}
	return placement.Inputs{Speed: speeds, Position: predictPrompt, Prompt: predictPrompt,
		Link: func(from, to string) (placement.Link, bool) {
			for _, l := range st.NodeLinkTelemetry[from].Links {
				if l.Peer != to || l.Probes == 0 {
					continue
				}
				mbps := float64(assumedLinkMbps)
				if l.CapacityMbps != nil && *l.CapacityMbps > 0 {
					mbps = *l.CapacityMbps
				}
				return placement.Link{OneWayMicros: l.RTTMinMs * 1e3 / 2, BytesPerSec: mbps * 1e6 / 8}, true
			}
			return placement.Link{}, false
		}}
}

// predictions lists every candidate plan of the model over nodes (all:
// only those over every node, which were named).
func (m *Manager) predictions(ml modelLayout, nodes []placement.Node, all bool) []placement.Prediction {
	if ml.file == nil {
		return nil
	}
	preds := placement.Candidates(ml.layout, placement.CostOf(ml.file, ml.cfg), nodes, all, m.costInputs(m.cfg.Store.State()))
	if ml.path == "" {
		for i := range preds {
			if preds[i].Tensor > 1 && preds[i].Error == "" {
				preds[i].Fits, preds[i].Error = false, "tensor-parallel slices are cut on a node that has the model: pull it to one first"
			}
		}
	}
	return preds
}

// predict is the prediction of the plan placed (nil when none can be
// made: no node has measured its speed).
func (m *Manager) predict(ml modelLayout, ranks []placement.Rank, tensor int) *placement.Prediction {
	if ml.file == nil || len(ranks) == 0 {
		return nil
	}
	p := placement.Plan{Pipeline: len(ranks), Tensor: 1, Ranks: ranks}
	if tensor > 1 {
		p.Pipeline, p.Tensor = len(ranks)/tensor, tensor
	}
	pr, err := placement.CostOf(ml.file, ml.cfg).Predict(p, m.costInputs(m.cfg.Store.State()))
	if err != nil {
		return nil
	}
	pr.Fits = true
	return &pr
}

// placeAuto places the model on the plan the cost model predicts fastest
// among those that fit: over the nodes named (pipeline or tensor over all
// of them), else over any prefix of the candidates. With no speed
// measured anywhere it places a pipeline, as by default.
func (m *Manager) placeAuto(ctx context.Context, req api.PlaceRequest, ml modelLayout, existed *bool) (state.Instance, error) {
	if len(req.Ranks) > 0 || req.Node != "" {
		return state.Instance{}, fmt.Errorf(`%w: "parallelism": "auto" chooses the ranks: name nodes (or none), not ranks or one node`, runner.ErrBadRequest)
	}
	nodes, err := m.candidates(req.Model, req.Nodes)
	if err != nil {
		return state.Instance{}, err
	}
	preds := m.predictions(ml, nodes, len(req.Nodes) > 0)
	best, ok := placement.Fastest(preds)
	pipeline := req
	pipeline.Parallelism = nil
	if !ok {
		noSpeed := len(preds) > 0
		for _, p := range preds {
			noSpeed = noSpeed && p.Error == placement.ErrNoSpeed.Error()
		}
		if noSpeed || len(preds) == 0 {
			m.log.Info("parallelism auto: no node has measured its speed yet; placing a pipeline", "model", req.Model)
			return m.place(ctx, pipeline, existed)
		}
		var why []string
		for _, p := range preds {
			why = append(why, p.Plan+": "+p.Error)
		}
		return state.Instance{}, fmt.Errorf("%w: no plan fits: %s", api.ErrNoMemory, strings.Join(why, "; "))
	}
	m.log.Info("parallelism auto", "model", req.Model, "plan", best.Plan, "nodes", best.Nodes,
		"decodeTokPerSec", fmt.Sprintf("%.1f", best.DecodeTokPerSec), "candidates", len(preds))
	if best.Tensor > 1 {
		tp := req
		tp.Parallelism, tp.Nodes = &api.Parallelism{Pipeline: 1, Tensor: best.Tensor}, best.Nodes
		return m.placeTensor(ctx, tp, ml, existed)
	}
	pipeline.Nodes = best.Nodes
	in, err := m.place(ctx, pipeline, existed)
	if errors.Is(err, placement.ErrNoFit) {
		return in, fmt.Errorf("%w (the plan the cost model chose, %s)", err, best.Plan)
	}
	return in, err
}
