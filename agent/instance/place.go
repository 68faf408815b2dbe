package instance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// modelLayout is what placing a model needs to know of it.
type modelLayout struct {
	size   uint64
	layout placement.Layout
	// source is where ranks pull their shards from (nil: a node has it).
	source *state.ModelSource
	// path is this node's copy ("" when placed from its source).
	path string
	// file and cfg are its header, for the cost model.
	file *gguf.File
	cfg  model.Config
}

// layout reads a model's placement layout: from this node's copy, else
// (for an hf.co reference no node has) from the header at its source.
func (m *Manager) layout(ctx context.Context, modelID string) (modelLayout, error) {
	e, ok := m.cfg.Models.Find(modelID)
	if !ok {
		if m.cfg.Sources != nil && m.cfg.Sources.IsSource(modelID) {
			return m.sourceLayout(ctx, modelID)
		}
		return modelLayout{}, fmt.Errorf("%w: %q is not on node %s (see orrery models ls)", api.ErrModelNotFound, modelID, m.cfg.Self)
	}
	// Found by a fresh scan (a file added since the last models sample):
	// tell the cluster now rather than at the next sample, so that other
	// nodes can preview and route it.
	if !slices.ContainsFunc(m.cfg.Store.State().NodeModels[m.cfg.Self].Models, func(m state.ModelInfo) bool { return m.ID == modelID }) {
		m.PublishModels()
	}
	if e.Error != "" {
		return modelLayout{}, fmt.Errorf("%w: %s cannot run here: %s", api.ErrModelNotFound, modelID, e.Error)
	}
	f, err := gguf.ReadFile(e.Path)
	if err != nil {
		return modelLayout{}, err
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return modelLayout{}, err
	}
	return modelLayout{size: uint64(e.SizeBytes), layout: placement.LayoutOf(f, cfg, m.cfg.ContextLen, m.cfg.Parallel), path: e.Path, file: f, cfg: cfg}, nil
}

// sourceLayout resolves an hf.co reference and reads its file's header
// from the hub: the ranks will pull only their own tensors.
func (m *Manager) sourceLayout(ctx context.Context, ref string) (modelLayout, error) {
	src, err := m.cfg.Sources.Resolve(ctx, ref)
	if err != nil {
		return modelLayout{}, fmt.Errorf("%w: no node has %s, and its source: %v", api.ErrModelNotFound, ref, err)
	}
	f, _, err := m.cfg.Sources.Header(ctx, src)
	if err != nil {
		return modelLayout{}, fmt.Errorf("%w: %v", api.ErrModelNotFound, err)
	}
	cfg, err := model.FromGGUF(f)
	if err == nil {
		_, err = tokenizer.New(f)
	}
	if err != nil {
		return modelLayout{}, fmt.Errorf("%w: %s cannot run: %v", api.ErrModelNotFound, ref, err)
	}
	return modelLayout{size: uint64(src.Size), layout: placement.LayoutOf(f, cfg, m.cfg.ContextLen, m.cfg.Parallel), source: &src, file: f, cfg: cfg}, nil
}

// candidates are the cluster's members with their available memory and
// the GPU each offloads to: the nodes that have the model first (no shard
// to transfer), then the others, most memory first, ties by id; or those
// named, in that order. With gpu 0 (a request's "gpuLayers": 0) no node
// brings its GPU.
func (m *Manager) candidates(modelID string, named []string, gpu *runnerapi.GPULayers) ([]placement.Node, error) {
	st := m.memoryKnown(named)
	avail := func(id string) uint64 {
		if m, ok := st.NodeMemory[id]; ok && m.RAMAvailable != nil {
			return m.RAMAvailable.InBytes
		}
		if id == m.cfg.Self { // measure our own now
			if ev, err := (&telemetry.MemorySampler{NodeID: id, Limit: m.cfg.RAMLimit}).Sample(context.Background()); err == nil {
				if m, ok := ev.(state.NodeMemoryMeasured); ok && m.Memory.RAMAvailable != nil {
					return m.Memory.RAMAvailable.InBytes
				}
			}
		}
		return 0
	}
	node := func(id string) placement.Node {
		n := placement.Node{ID: id, Available: avail(id), GPU: offloadGPU(st.NodeIdentities[id].GPUs)}
		if gpu != nil && *gpu == 0 {
			n.GPU = nil
		}
		return n
	}
	if len(named) > 0 {
		var out []placement.Node
		for _, id := range named {
			if _, ok := st.NodeIdentities[id]; !ok && id != m.cfg.Self {
				return nil, fmt.Errorf("%w: node %s is not a member of this cluster", api.ErrModelNotFound, id)
			}
			if slices.ContainsFunc(out, func(n placement.Node) bool { return n.ID == id }) {
				return nil, fmt.Errorf("node %s named twice", id)
			}
			out = append(out, node(id))
		}
		return out, nil
	}
	var out []placement.Node
	for id := range st.NodeIdentities {
		out = append(out, node(id))
	}
	if _, ok := st.NodeIdentities[m.cfg.Self]; !ok {
		out = append(out, node(m.cfg.Self))
	}
	// This node's own list is read from disk: the replicated one can lag
	// behind (e.g. just after a master change replaced the state).
	self, _ := m.cfg.Models.Find(modelID)
	has := func(id string) bool {
		if id == m.cfg.Self {
			return self.ID != "" && self.Error == ""
		}
		return slices.ContainsFunc(st.NodeModels[id].Models, func(m state.ModelInfo) bool { return m.ID == modelID && m.Error == "" })
	}
	slices.SortFunc(out, func(x, y placement.Node) int {
		if hx, hy := has(x.ID), has(y.ID); hx != hy {
			if hx {
				return -1
			}
			return 1
		}
		if x.Available != y.Available {
			if x.Available > y.Available {
				return -1
			}
			return 1
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out, nil
}

// offloadGPU is the GPU a node's runners offload to, of those its
// identity lists: the one with the most free memory, as a runner picks
// (engine/backend/ggml's pickDevice). A node lists a software device only
// where its runners may use one (--gpu-software). nil: none.
func offloadGPU(ds []runnerapi.Device) *runnerapi.Device {
	var best *runnerapi.Device
	for i := range ds {
		if best == nil || ds[i].FreeBytes > best.FreeBytes {
			best = &ds[i]
		}
	}
	if best == nil {
		return nil
	}
	d := *best
	return &d
}

// memoryKnown waits (at most memoryWait) until the state holds a memory
// sample of every node named (or every member): a node that just joined
// has none yet, and placing it would count its memory as 0.
func (m *Manager) memoryKnown(named []string) state.State {
	deadline := time.Now().Add(memoryWait)
	for {
		st := m.cfg.Store.State()
		ids := named
		if len(ids) == 0 {
			ids = []string{m.cfg.Self} // this node's own entry can lag too
			for id := range st.NodeIdentities {
				ids = append(ids, id)
			}
		}
		missing := false
		for _, id := range ids {
			if m, ok := st.NodeMemory[id]; !ok || m.RAMAvailable == nil {
				missing = true
			}
		}
		if !missing || time.Now().After(deadline) {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memoryWait bounds memoryKnown's wait (memory is sampled every 0.5 s).
const memoryWait = 3 * time.Second

// Previews lists the candidate placements of a model on this node's
// cluster (this node must have the model: the API forwards otherwise),
// for ranks with gpuLayers' blocks on their GPUs (nil: each node's
// default). How many blocks each rank would put there is placement's to
// predict; the request's setting is carried to the answer.
func (m *Manager) Previews(modelID string, gpuLayers *runnerapi.GPULayers) (api.PreviewsResponse, error) {
	ml, err := m.layout(context.Background(), modelID)
	l := ml.layout
	if err != nil {
		return api.PreviewsResponse{}, err
	}
	nodes, err := m.candidates(modelID, nil, gpuLayers)
	if err != nil {
		return api.PreviewsResponse{}, err
	}
	var total uint64
	for _, b := range l.Block {
		total += b
	}
	plans := m.predictions(ml, nodes, false)
	if plans == nil {
		plans = []runnerapi.Prediction{}
	}
	auto := ""
	if best, ok := placement.Fastest(plans); ok {
		auto = best.Plan
	}
	// Each pipeline as auto would split it (the same as the plans'), its
	// ranks' blocks on their GPUs and CPUs.
	previews := placement.Previews(l, nodes)
	if ml.file != nil {
		previews = placement.CostOf(ml.file, ml.cfg).Previews(l, nodes, m.costInputs(m.cfg.Store.State()))
	}
	return api.PreviewsResponse{Model: modelID, Layers: l.Layers, ModelBytes: ml.size, ContextLen: l.ContextLen,
		Previews: previews, Plans: plans, Auto: auto, GPULayers: gpuLayers}, nil
}

// Place creates an instance of a model that is on this node: on the
// ranks, nodes or node the request names, else the best placement. When
// the model already runs on the same set of nodes (in any order), it
// returns that instance and existed, unless the request asks for a
// Duplicate.
func (m *Manager) Place(ctx context.Context, req api.PlaceRequest) (in state.Instance, existed bool, err error) {
	in, err = m.place(ctx, req, &existed)
	return in, existed, err
}

func (m *Manager) place(ctx context.Context, req api.PlaceRequest, existed *bool) (state.Instance, error) {
	if sp := req.Speculative; sp != nil {
		if err := sp.CheckDefault(req.DraftModel); err != nil {
			return state.Instance{}, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
		}
	}
	ml, err := m.layout(ctx, req.Model)
	l := ml.layout
	if err != nil {
		return state.Instance{}, err
	}
	if p := req.Parallelism; p != nil && p.Auto {
		return m.placeAuto(ctx, req, ml, existed)
	}
	if req.Parallelism.TensorParallel() {
		return m.placeTensor(ctx, req, ml, existed)
	}
	if p := req.Parallelism; p != nil && p.Tensor == 1 && p.Pipeline == 1 && len(req.Nodes) > 1 { // one node's shape
		return state.Instance{}, fmt.Errorf(`%w: {"pipeline": 1, "tensor": 1} on %d nodes`, runnerapi.ErrBadRequest, len(req.Nodes))
	}
	var ranks []placement.Rank
	switch {
	case len(req.Ranks) > 0:
		var named []string
		var rg [][2]int
		for _, r := range req.Ranks {
			named = append(named, r.NodeID)
			rg = append(rg, [2]int{r.FirstLayer, r.LastLayer})
		}
		nodes, err := m.candidates(req.Model, named, req.GPULayers)
		if err != nil {
			return state.Instance{}, err
		}
		ranks, err = placement.Ranges(l, nodes, rg)
		if err != nil {
			return state.Instance{}, placeErr(err)
		}
	case len(req.Nodes) > 0 || req.Node != "":
		named := req.Nodes
		if req.Node != "" {
			named = []string{req.Node}
		}
		nodes, err := m.candidates(req.Model, named, req.GPULayers)
		if err != nil {
			return state.Instance{}, err
		}
		if ranks, err = placement.Split(l, nodes); err != nil {
			return state.Instance{}, placeErr(err)
		}
	default:
		nodes, err := m.candidates(req.Model, nil, req.GPULayers)
		if err != nil {
			return state.Instance{}, err
		}
		if ranks, err = placement.Best(l, nodes); err != nil {
			return state.Instance{}, placeErr(err)
		}
	}
	return m.create(ctx, req, ml, ranks, runnerapi.Shape{Pipeline: len(ranks), Tensor: 1}, existed)
}

// create publishes an instance of ranks in shape sh, or answers with a
// live one on the same nodes and split.
func (m *Manager) create(ctx context.Context, req api.PlaceRequest, ml modelLayout, ranks []placement.Rank, sh runnerapi.Shape, existed *bool) (state.Instance, error) {
	// Checked and created (to the state) under one lock, so that two
	// placements at once cannot both pass the check.
	m.createMu.Lock()
	defer m.createMu.Unlock()
	live := m.liveInstances(req.Model)
	if !req.Duplicate {
		for _, in := range live {
			if !sameNodes(in.Ranks, ranks) || in.Shape() != sh || in.DraftModel != req.DraftModel || !runnerapi.SameSpeculation(in.Speculative, req.Speculative) ||
				!sameGPULayers(in.GPULayers, req.GPULayers) {
				continue
			}
			in, ok, err := m.reuse(ctx, in, req)
			if err != nil || ok {
				*existed = ok
				return in, err
			}
		}
	}
	if req.IfNone && len(live) > 0 {
		return state.Instance{}, fmt.Errorf("%w: %s already runs as instance %s", api.ErrConflict, req.Model, live[0].InstanceID)
	}
	draft, err := m.draftNeed(ctx, req.DraftModel, ranks[0].NodeID)
	if err == nil {
		err = addDraft(ranks, req.DraftModel, draft)
	}
	if err != nil {
		return state.Instance{}, err
	}
	var b [4]byte
	rand.Read(b[:])
	in := state.Instance{InstanceID: "inst-" + hex.EncodeToString(b[:]), ModelID: req.Model, NodeID: m.cfg.Self,
		CreatedAt: time.Now().UTC(), Status: state.InstanceStatusActive, Pinned: true, Parallel: max(m.cfg.Parallel, 1),
		Source: ml.source, Prediction: m.predict(ml, ranks, sh), DraftModel: req.DraftModel, Speculative: req.Speculative, GPULayers: req.GPULayers}
	in.SetShape(sh)
	if k := req.KeepAlive; k != nil && !k.Pinned() {
		// Unloaded if its first request does not come (or comes and ends).
		exp := in.CreatedAt.Add(k.D + firstUseGrace)
		in.Pinned, in.KeepAliveMs, in.ExpiresAt = false, k.Ms(), &exp
	}
	for _, r := range ranks {
		in.Ranks = append(in.Ranks, state.ShardRange{Rank: r.Rank, NodeID: r.NodeID, FirstLayer: r.FirstLayer, LastLayer: r.LastLayer,
			NeedBytes: r.Need, Slice: r.Slice})
	}
	if err := m.cfg.Publish(state.InstanceCreated{NodeID: m.cfg.Self, Instance: in}); err != nil {
		return state.Instance{}, fmt.Errorf("publish instance: %w", err)
	}
	if err := m.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[in.InstanceID]; return ok }); err != nil {
		// Not acknowledged, so not kept: this node's record drops it too,
		// and asserts that once the master answers again.
		if rerr := m.cfg.Publish(state.InstanceDeleted{NodeID: m.cfg.Self, InstanceID: in.InstanceID}); rerr != nil {
			m.log.Warn("retract unacknowledged instance", "instance", in.InstanceID, "err", rerr)
		}
		return state.Instance{}, fmt.Errorf("instance %s: not in the state after %v (no master answered; placement withdrawn): %w", in.InstanceID, placeWait, err)
	}
	m.log.Info("instance placed", "instance", in.InstanceID, "model", req.Model, "ranks", len(in.Ranks))
	return in, nil
}

// reuse answers a placement with in, a live instance of the model on the
// same nodes. A placement that pins (no keep-alive: asked for explicitly)
// pins an instance loaded on demand, which this node must own (its record
// then keeps it across restarts); one owned elsewhere is not reused (ok
// false: place another). Called with createMu held.
func (m *Manager) reuse(ctx context.Context, in state.Instance, req api.PlaceRequest) (state.Instance, bool, error) {
	if pin := req.KeepAlive == nil || req.KeepAlive.Pinned(); pin && !in.Pinned {
		if in.NodeID != m.cfg.Self {
			return state.Instance{}, false, nil
		}
		in.Pinned, in.KeepAliveMs, in.ExpiresAt = true, 0, nil
		if err := m.cfg.Publish(state.InstanceCreated{NodeID: m.cfg.Self, Instance: in}); err != nil {
			return state.Instance{}, false, fmt.Errorf("pin instance %s: %w", in.InstanceID, err)
		}
		if err := m.waitState(ctx, func(s state.State) bool { return s.Instances[in.InstanceID].Pinned }); err != nil {
			return state.Instance{}, false, fmt.Errorf("instance %s: not pinned in the state after %v (no master answered): %w", in.InstanceID, placeWait, err)
		}
		m.log.Info("placement pinned the instance loaded on demand on the same nodes", "instance", in.InstanceID, "model", req.Model)
		return in, true, nil
	}
	m.log.Info("placement answered with the live instance on the same nodes", "instance", in.InstanceID, "model", req.Model)
	return in, true, nil
}

func placeErr(err error) error {
	if errors.Is(err, placement.ErrNoFit) {
		// Both say "model does not fit": once is enough.
		return fmt.Errorf("%w: %s", api.ErrNoMemory, strings.TrimPrefix(err.Error(), placement.ErrNoFit.Error()+": "))
	}
	return fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
}

// liveInstances are the model's instances that are not Failed: those in
// the state, and this node's own not yet back in it (restored at start),
// sorted by id.
func (m *Manager) liveInstances(modelID string) []state.Instance {
	byID := map[string]state.Instance{}
	if m.cfg.Owned != nil {
		for _, in := range m.cfg.Owned() {
			byID[in.InstanceID] = in
		}
	}
	for id, in := range m.cfg.Store.State().Instances {
		byID[id] = in
	}
	var out []state.Instance
	for _, in := range byID {
		if in.ModelID == modelID && in.Status != state.InstanceStatusFailed {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(x, y state.Instance) int { return strings.Compare(x.InstanceID, y.InstanceID) })
	return out
}

// sameNodes reports whether an instance's ranks and a placement use the
// same set of nodes, in whatever order.
func sameNodes(a []state.ShardRange, b []placement.Rank) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		x[i], y[i] = a[i].NodeID, b[i].NodeID
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// Delete stops the instance's runners (Shutdown) and removes it; ranks on
// other nodes stop when they see it gone.
func (m *Manager) Delete(ctx context.Context, instanceID string) error {
	in, ok := m.cfg.Store.State().Instances[instanceID]
	if !ok || in.NodeID != m.cfg.Self {
		return fmt.Errorf("%w: instance %s", api.ErrNotHere, instanceID)
	}
	m.cfg.Runners.Stop(instanceID)
	if err := m.cfg.Publish(state.InstanceDeleted{NodeID: m.cfg.Self, InstanceID: instanceID}); err != nil {
		return fmt.Errorf("publish instance deletion: %w", err)
	}
	if err := m.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[instanceID]; return !ok }); err != nil {
		// The runners are stopped and this node's record has dropped it:
		// the deletion stands, and is asserted once a master answers.
		return fmt.Errorf("instance %s: still in the state after %v (no master answered; the deletion stands and reaches the state when one does): %w", instanceID, placeWait, err)
	}
	m.log.Info("instance deleted", "instance", instanceID)
	return nil
}

// sameGPULayers reports whether two instances' GPU layers are the same
// request (nil: each node's default).
func sameGPULayers(a, b *runnerapi.GPULayers) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
