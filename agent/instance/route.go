package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
)

// Route picks the live instance of model that serves a request and
// returns it with the node of its rank 0 (which drives generation): one
// with every rank Ready first, then one whose rank 0 is here. A model
// with no instance that some node has on disk is placed (load on demand),
// as POST /instance {"model"} would; when only failed instances are left
// it places a new one (and removes them). One request places, the others
// wait for it.
func (m *Manager) Route(ctx context.Context, modelID string, keepAlive *api.KeepAlive) (string, string, error) {
	id, node, failed := m.pick(modelID)
	if id != "" {
		return id, node, nil
	}
	if len(failed) == 0 {
		if _, err := m.PickNode(modelID); err != nil {
			return "", "", fmt.Errorf("%w (running: %s)", err, runningModels(m.cfg.Store.State()))
		}
	}
	m.placeMu.Lock()
	defer m.placeMu.Unlock()
	id, node, failed = m.pick(modelID)
	if id != "" {
		return id, node, nil
	}
	if len(failed) == 0 {
		return m.placeOnDemand(ctx, modelID, m.keepAlive(keepAlive))
	}
	// Replace the failed instance.
	old := failed[0]
	var nodes []string
	st := m.cfg.Store.State()
	for _, rk := range old.Ranks {
		if _, ok := st.NodeIdentities[rk.NodeID]; ok {
			nodes = append(nodes, rk.NodeID)
		}
	}
	req := api.PlaceRequest{Model: modelID, KeepAlive: keepAliveOf(old), GPULayers: old.GPULayers}
	if len(nodes) == len(old.Ranks) {
		// The same nodes, split afresh, as it was placed: its tensor
		// groups, its draft model beside rank 0 and its default
		// speculation. (Elsewhere, the draft's node may not be rank 0's.)
		req.Nodes, req.DraftModel, req.Speculative = nodes, old.DraftModel, old.Speculative
		if sh := old.Shape(); sh.TensorParallel() {
			req.Parallelism = api.ParallelismOf(sh)
		}
	}
	m.log.Info("replacing failed instance", "instance", old.InstanceID, "model", modelID, "error", old.Error)
	in, err := m.placeAnywhere(ctx, req)
	if err != nil {
		return "", "", fmt.Errorf("replace failed instance %s (%s): %w", old.InstanceID, old.Error, err)
	}
	for _, f := range failed {
		m.deleteAnywhere(ctx, f)
	}
	if err := m.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[in.InstanceID]; return ok }); err != nil {
		return "", "", err
	}
	return in.InstanceID, in.Ranks[0].NodeID, nil
}

// placeOnDemand places a model that has no instance, for Route. Another
// node may be placing it at the same moment: its holder then refuses the
// second placement (409), and this waits for the first to show.
func (m *Manager) placeOnDemand(ctx context.Context, modelID string, keepAlive api.KeepAlive) (string, string, error) {
	m.log.Info("placing on demand", "model", modelID, "keepAlive", keepAlive)
	in, err := m.placeAnywhere(ctx, api.PlaceRequest{Model: modelID, IfNone: true, KeepAlive: &keepAlive,
		Parallelism: &api.Parallelism{Auto: true}})
	if err != nil && !errors.Is(err, api.ErrConflict) {
		return "", "", fmt.Errorf("load %s on demand: %w", modelID, err)
	}
	var id, node string
	err = m.waitState(ctx, func(s state.State) bool {
		if in.InstanceID != "" {
			_, ok := s.Instances[in.InstanceID]
			id, node = in.InstanceID, in.Ranks[0].NodeID
			return ok
		}
		id, node, _ = m.pick(modelID)
		return id != ""
	})
	return id, node, err
}

// keepAliveOf is an instance's keep-alive as a placement asks for it (nil:
// pinned).
func keepAliveOf(in state.Instance) *api.KeepAlive {
	if in.Pinned {
		return nil
	}
	return &api.KeepAlive{D: time.Duration(in.KeepAliveMs) * time.Millisecond}
}

// keepAlive is a request's keep-alive, or the agent's default.
func (m *Manager) keepAlive(k *api.KeepAlive) api.KeepAlive {
	switch {
	case k != nil:
		return *k
	case m.cfg.KeepAlive != nil:
		return *m.cfg.KeepAlive
	}
	return api.KeepAlive{D: api.DefaultKeepAlive}
}

// pick is Route's choice among live instances; failed lists the failed
// ones of the model.
func (m *Manager) pick(modelID string) (id, node string, failed []state.Instance) {
	st := m.cfg.Store.State()
	best := -1
	for iid, in := range st.Instances {
		if in.ModelID != modelID || len(in.Ranks) == 0 {
			continue
		}
		if in.Status == state.InstanceStatusFailed {
			failed = append(failed, in)
			continue
		}
		score := 0
		ready := true
		for _, rk := range in.Ranks {
			r, ok := st.Runners[supervisor.RunnerID(iid, rk.Rank)]
			ready = ready && ok && (r.Status == state.RunnerReady || r.Status == state.RunnerRunning)
		}
		if ready {
			score += 4
		}
		if in.Ranks[0].NodeID == m.cfg.Self {
			score += 2
		}
		if score > best || score == best && iid < id {
			best, id, node = score, iid, in.Ranks[0].NodeID
		}
	}
	slices.SortFunc(failed, func(x, y state.Instance) int { return strings.Compare(x.InstanceID, y.InstanceID) })
	return id, node, failed
}

// placeAnywhere places through the node that has the model (this one, or
// over the peer API), as POST /instance does.
func (m *Manager) placeAnywhere(ctx context.Context, req api.PlaceRequest) (state.Instance, error) {
	holder, err := m.PickNode(req.Model)
	if err != nil {
		return state.Instance{}, err
	}
	if holder == m.cfg.Self {
		in, _, err := m.Place(ctx, req)
		return in, err
	}
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+holder+"/instance", bytes.NewReader(b))
	if err != nil {
		return state.Instance{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := m.cfg.Peer.Do(hr)
	if err != nil {
		return state.Instance{}, fmt.Errorf("place on %s: %w", holder, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("place on %s: %s %s", holder, resp.Status, body)
		switch resp.StatusCode { // keep the holder's answer's status
		case http.StatusConflict:
			err = fmt.Errorf("%w: %v", api.ErrConflict, err)
		case http.StatusInsufficientStorage:
			err = fmt.Errorf("%w: %v", api.ErrNoMemory, err)
		case http.StatusNotFound:
			err = fmt.Errorf("%w: %v", api.ErrModelNotFound, err)
		}
		return state.Instance{}, err
	}
	var pr api.PlaceResponse
	if err := json.Unmarshal(body, &pr); err != nil {
		return state.Instance{}, fmt.Errorf("place on %s: %w", holder, err)
	}
	return pr.Instance, nil
}

// deleteAnywhere removes an instance through its owner.
func (m *Manager) deleteAnywhere(ctx context.Context, in state.Instance) {
	if in.NodeID == m.cfg.Self {
		if err := m.Delete(ctx, in.InstanceID); err != nil {
			m.log.Warn("delete instance", "instance", in.InstanceID, "err", err)
		}
		return
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+in.NodeID+"/instance/"+in.InstanceID, nil)
	if err != nil {
		return
	}
	if resp, err := m.cfg.Peer.Do(hr); err == nil {
		resp.Body.Close()
	} else {
		m.log.Warn("delete instance", "instance", in.InstanceID, "owner", in.NodeID, "err", err)
	}
}

func runningModels(st state.State) string {
	var ids []string
	for _, in := range st.Instances {
		if !slices.Contains(ids, in.ModelID) && in.Status != state.InstanceStatusFailed {
			ids = append(ids, in.ModelID)
		}
	}
	if len(ids) == 0 {
		return "none"
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}

// Progress sums an instance's ranks' loading from the state; a failed
// rank, or a failed or vanished instance, is an error naming it.
func (m *Manager) Progress(instanceID string) (api.LoadProgress, error) {
	st := m.cfg.Store.State()
	in, ok := st.Instances[instanceID]
	if !ok {
		return api.LoadProgress{}, fmt.Errorf("%w: instance %s is gone", api.ErrModelNotRunning, instanceID)
	}
	p := api.LoadProgress{Ready: true}
	for _, rk := range in.Ranks {
		r, ok := st.Runners[supervisor.RunnerID(instanceID, rk.Rank)]
		if ok && r.Status == state.RunnerFailed {
			return p, fmt.Errorf("%w: rank %d of %s on node %s: %s", api.ErrLoadFailed, rk.Rank, instanceID, rk.NodeID, r.Error)
		}
		p.Loaded += r.LayersLoaded
		p.Total += rk.LastLayer - rk.FirstLayer
		p.Ready = p.Ready && ok && (r.Status == state.RunnerReady || r.Status == state.RunnerRunning)
	}
	if in.Status == state.InstanceStatusFailed {
		return p, fmt.Errorf("%w: instance %s: %s", api.ErrLoadFailed, instanceID, in.Error)
	}
	if p.Ready {
		p.Loaded = p.Total
	}
	return p, nil
}

// PickNode is this node if it has the model, else the first node (by id)
// that has it without error, else this node for an hf.co reference (its
// ranks pull their shards from the hub).
func (m *Manager) PickNode(modelID string) (string, error) {
	st := m.cfg.Store.State()
	has := func(node string) bool {
		return slices.ContainsFunc(st.NodeModels[node].Models, func(m state.ModelInfo) bool { return m.ID == modelID && m.Error == "" })
	}
	if e, ok := m.cfg.Models.Find(modelID); ok && e.Error == "" {
		return m.cfg.Self, nil
	}
	nodes := make([]string, 0, len(st.NodeModels))
	for n := range st.NodeModels {
		if _, member := st.NodeIdentities[n]; member && n != m.cfg.Self {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		if has(n) {
			return n, nil
		}
	}
	if m.cfg.Sources != nil && m.cfg.Sources.IsSource(modelID) {
		return m.cfg.Self, nil // placed from its source, here
	}
	return "", fmt.Errorf("%w: no node has a model %q (see GET /v1/models, or orrery models ls on each machine)", api.ErrModelNotFound, modelID)
}
