package instance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The cost model's operating point: decode after a prompt of
// predictPrompt tokens, and that prompt's prefill.
const predictPrompt = 512

// assumedLinkMbps stands in for a link whose interface reports no speed.
const assumedLinkMbps = 1000

// costInputs are the cluster's measurements as the cost model takes them:
// each node's speed (from its identity) and each link's one-way latency
// (half the smallest measured round trip: the floor a small message
// pays) and capacity; a pair not measured yet takes the slowest measured
// link's figures.
func (m *Manager) costInputs(st state.State) placement.Inputs {
	speeds := map[string]runnerapi.Speed{}
	for id, ni := range st.NodeIdentities {
		if ni.Speed != nil {
			speeds[id] = *ni.Speed
		}
	}
	m.reduces.learn(st)
	link := func(l state.LinkTelemetry) placement.Link {
		mbps := float64(assumedLinkMbps)
		if l.CapacityMbps != nil && *l.CapacityMbps > 0 {
			mbps = *l.CapacityMbps
		}
		return placement.Link{OneWayMicros: l.RTTMinMs * 1e3 / 2, BytesPerSec: mbps * 1e6 / 8}
	}
	return placement.Inputs{Speed: speeds, Position: predictPrompt, Prompt: predictPrompt, Reduce: m.reduces.get, Direct: m.cfg.DirectLinks,
		Link: func(from, to string) (placement.Link, bool) {
			for _, l := range st.NodeLinkTelemetry[from].Links {
				if l.Peer == to && l.Probes > 0 {
					return link(l), true
				}
			}
			return placement.Link{}, false
		},
		Unmeasured: func() (placement.Link, bool) {
			var worst placement.Link
			found := false
			for _, nl := range st.NodeLinkTelemetry {
				for _, l := range nl.Links {
					if x := link(l); l.Probes > 0 && (!found || x.OneWayMicros > worst.OneWayMicros) {
						worst, found = x, true
					}
				}
			}
			return worst, found
		}}
}

// reduceSeen remembers the mean all-reduce each tensor-parallel group's
// leader measured in decode (state.Runner.ReduceMicros), by the group's
// nodes, for as long as this agent runs: a later placement on the same
// nodes is predicted from it, even after that instance is gone.
type reduceSeen struct {
	mu sync.Mutex
	m  map[string]float64
}

func groupKey(nodes []string) string {
	s := slices.Clone(nodes)
	slices.Sort(s)
	return strings.Join(s, ",")
}

// learn takes the measurements of the live groups in st.
func (r *reduceSeen) learn(st state.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range st.Runners {
		in, ok := st.Instances[run.InstanceID]
		if run.Rank != 0 || run.ReduceMicros <= 0 || !ok || !in.Shape().TensorParallel() {
			continue
		}
		nodes := make([]string, len(in.Ranks))
		for i, rk := range in.Ranks {
			nodes[i] = rk.NodeID
		}
		if r.m == nil {
			r.m = map[string]float64{}
		}
		r.m[groupKey(nodes)] = run.ReduceMicros
	}
}

func (r *reduceSeen) get(nodes []string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	us, ok := r.m[groupKey(nodes)]
	return us, ok
}

// predictions lists every candidate plan of the model over nodes (all:
// only those over every node, which were named).
func (m *Manager) predictions(ml modelLayout, nodes []placement.Node, all bool) []runnerapi.Prediction {
	if ml.file == nil {
		return nil
	}
	return placement.Candidates(ml.layout, placement.CostOf(ml.file, ml.cfg), nodes, all, m.costInputs(m.cfg.Store.State()))
}

// predict is the prediction of the plan placed (nil when none can be
// made: no node has measured its speed).
func (m *Manager) predict(ml modelLayout, ranks []placement.Rank, sh runnerapi.Shape) *runnerapi.Prediction {
	if ml.file == nil || len(ranks) == 0 {
		return nil
	}
	p := placement.Plan{Shape: sh, Ranks: ranks}
	pr, err := placement.CostOf(ml.file, ml.cfg).Predict(p, m.costInputs(m.cfg.Store.State()))
	if err != nil {
		m.log.Info("no prediction for the plan placed", "plan", sh.String(), "err", err)
		return nil
	}
	pr.Fits = true
	return &pr
}

// placeAuto places the model on the plan the cost model predicts fastest
// among those that fit: over the nodes named (pipeline or tensor over all
// of them), else over any prefix of the candidates. When no plan that
// fits can be predicted (no speed measured yet, or none fits), it places
// as by default: a pipeline, or the default's error with its numbers.
func (m *Manager) placeAuto(ctx context.Context, req api.PlaceRequest, ml modelLayout, existed *bool) (state.Instance, error) {
	if len(req.Ranks) > 0 || req.Node != "" {
		return state.Instance{}, fmt.Errorf(`%w: "parallelism": "auto" chooses the ranks: name nodes (or none), not ranks or one node`, runnerapi.ErrBadRequest)
	}
	nodes, err := m.candidates(req.Model, req.Nodes, req.GPULayers)
	if err != nil {
		return state.Instance{}, err
	}
	preds := m.predictions(ml, nodes, len(req.Nodes) > 0)
	best, ok := placement.Fastest(preds)
	pipeline := req
	pipeline.Parallelism = nil
	if !ok {
		// Nothing predicted fits: no speed measured yet, or no plan fits.
		// The default placement says which, with its numbers.
		m.log.Info("parallelism auto: no plan predicted that fits; placing a pipeline", "model", req.Model, "candidates", len(preds))
		return m.place(ctx, pipeline, existed)
	}
	m.log.Info("parallelism auto", "model", req.Model, "plan", best.Plan, "nodes", best.Nodes,
		"decodeTokPerSec", fmt.Sprintf("%.1f", best.DecodeTokPerSec), "candidates", len(preds))
	if best.TensorParallel() {
		tp := req
		tp.Parallelism, tp.Nodes = api.ParallelismOf(best.Shape), best.Nodes
		return m.placeTensor(ctx, tp, ml, existed)
	}
	// The pipeline's split the prediction was of: by memory, or the one
	// that follows speed (placement's Pipeline).
	pipeline.Nodes = best.Nodes
	nodes, err = m.candidates(req.Model, best.Nodes, req.GPULayers)
	if err != nil {
		return state.Instance{}, err
	}
	ranks, err := placement.CostOf(ml.file, ml.cfg).Pipeline(ml.layout, nodes, m.costInputs(m.cfg.Store.State()))
	if err != nil {
		if errors.Is(err, placement.ErrNoFit) {
			return state.Instance{}, fmt.Errorf("%w (the plan the cost model chose, %s)", placeErr(err), best.Plan)
		}
		return state.Instance{}, placeErr(err)
	}
	return m.create(ctx, pipeline, ml, ranks, runnerapi.Shape{Pipeline: len(ranks), Tensor: 1}, existed)
}
