package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Model serving on this node: the model scan, the runner supervisor, the
// api.Inference the API calls, the peer API that other nodes forward to,
// and the traces of requests and loads.

// ModelScanInterval is how often the models on disk are scanned.
const ModelScanInterval = 10 * time.Second

// placeWait bounds how long POST /instance waits for its event to come
// back from the master into this node's state.
const placeWait = 5 * time.Second

type inference struct{ a *Agent }

var _ api.Inference = inference{}

func (v inference) Peer() *http.Client { return v.a.peerHTTP }

// Route picks the live instance of model that serves a request and
// returns it with the node of its rank 0 (which drives generation): one
// with every rank Ready first, then one whose rank 0 is here. When only
// failed instances are left it places a new one (and removes them).
func (v inference) Route(ctx context.Context, modelID string) (string, string, error) {
	a := v.a
	id, node, failed := a.pick(modelID)
	if id != "" {
		return id, node, nil
	}
	if len(failed) == 0 {
		st := a.store.State()
		return "", "", fmt.Errorf("%w: %q has no instance; place one with POST /instance {\"model\": %q} (running: %s)",
			api.ErrModelNotRunning, modelID, modelID, runningModels(st))
	}
	// Replace the failed instance: one request does it, the others wait.
	a.placeMu.Lock()
	defer a.placeMu.Unlock()
	if id, node, _ := a.pick(modelID); id != "" {
		return id, node, nil
	}
	old := failed[0]
	var nodes []string
	st := a.store.State()
	for _, rk := range old.Ranks {
		if _, ok := st.NodeIdentities[rk.NodeID]; ok {
			nodes = append(nodes, rk.NodeID)
		}
	}
	req := api.PlaceRequest{Model: modelID}
	if len(nodes) == len(old.Ranks) {
		req.Nodes = nodes // the same nodes, split afresh
	}
	a.log.Info("replacing failed instance", "instance", old.InstanceID, "model", modelID, "error", old.Error)
	in, err := a.placeAnywhere(ctx, req)
	if err != nil {
		return "", "", fmt.Errorf("replace failed instance %s (%s): %w", old.InstanceID, old.Error, err)
	}
	for _, f := range failed {
		a.deleteAnywhere(ctx, f)
	}
	if err := a.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[in.InstanceID]; return ok }); err != nil {
		return "", "", err
	}
	return in.InstanceID, in.Ranks[0].NodeID, nil
}

// pick is Route's choice among live instances; failed lists the failed
// ones of the model.
func (a *Agent) pick(modelID string) (id, node string, failed []state.Instance) {
	st := a.store.State()
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
		if in.Ranks[0].NodeID == a.identity.NodeID {
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
func (a *Agent) placeAnywhere(ctx context.Context, req api.PlaceRequest) (state.Instance, error) {
	holder, err := inference{a}.PickNode(req.Model)
	if err != nil {
		return state.Instance{}, err
	}
	if holder == a.identity.NodeID {
		return inference{a}.Place(ctx, req)
	}
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+holder+"/instance", bytes.NewReader(b))
	if err != nil {
		return state.Instance{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := a.peerHTTP.Do(hr)
	if err != nil {
		return state.Instance{}, fmt.Errorf("place on %s: %w", holder, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		return state.Instance{}, fmt.Errorf("place on %s: %s %s", holder, resp.Status, body)
	}
	var pr api.PlaceResponse
	if err := json.Unmarshal(body, &pr); err != nil {
		return state.Instance{}, fmt.Errorf("place on %s: %w", holder, err)
	}
	return pr.Instance, nil
}

// deleteAnywhere removes an instance through its owner.
func (a *Agent) deleteAnywhere(ctx context.Context, in state.Instance) {
	if in.NodeID == a.identity.NodeID {
		if err := (inference{a}).Delete(ctx, in.InstanceID); err != nil {
			a.log.Warn("delete instance", "instance", in.InstanceID, "err", err)
		}
		return
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+in.NodeID+"/instance/"+in.InstanceID, nil)
	if err != nil {
		return
	}
	if resp, err := a.peerHTTP.Do(hr); err == nil {
		resp.Body.Close()
	} else {
		a.log.Warn("delete instance", "instance", in.InstanceID, "owner", in.NodeID, "err", err)
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

// PickNode is this node if it has the model, else the first node (by id)
// that has it without error.
func (v inference) PickNode(modelID string) (string, error) {
	st := v.a.store.State()
	has := func(node string) bool {
		return slices.ContainsFunc(st.NodeModels[node].Models, func(m state.ModelInfo) bool { return m.ID == modelID && m.Error == "" })
	}
	if e, ok := v.a.models.Find(modelID); ok && e.Error == "" {
		return v.a.identity.NodeID, nil
	}
	nodes := make([]string, 0, len(st.NodeModels))
	for n := range st.NodeModels {
		if _, member := st.NodeIdentities[n]; member && n != v.a.identity.NodeID {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		if has(n) {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w: no node has a model %q (see GET /v1/models, or orrery models ls on each machine)", api.ErrModelNotFound, modelID)
}

// layout reads a local model's placement layout.
func (a *Agent) layout(modelID string) (model.Entry, placement.Layout, error) {
	e, ok := a.models.Find(modelID)
	if !ok {
		return e, placement.Layout{}, fmt.Errorf("%w: %q is not on node %s (see orrery models ls)", api.ErrModelNotFound, modelID, a.identity.NodeID)
	}
	// Found by a fresh scan (a file added since the last models sample):
	// tell the cluster now rather than at the next sample, so that other
	// nodes can preview and route it.
	if !slices.ContainsFunc(a.store.State().NodeModels[a.identity.NodeID].Models, func(m state.ModelInfo) bool { return m.ID == modelID }) {
		a.publishModels()
	}
	if e.Error != "" {
		return e, placement.Layout{}, fmt.Errorf("%w: %s cannot run here: %s", api.ErrModelNotFound, modelID, e.Error)
	}
	f, err := gguf.ReadFile(e.Path)
	if err != nil {
		return e, placement.Layout{}, err
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return e, placement.Layout{}, err
	}
	return e, placement.LayoutOf(f, cfg, a.cfg.ContextLen), nil
}

// candidates are the cluster's members with their available memory: the
// nodes that have the model first (no shard to transfer), then the
// others, most memory first, ties by id; or those named, in that order.
func (a *Agent) candidates(modelID string, named []string) ([]placement.Node, error) {
	st := a.memoryKnown(named)
	avail := func(id string) uint64 {
		if m, ok := st.NodeMemory[id]; ok && m.RAMAvailable != nil {
			return m.RAMAvailable.InBytes
		}
		if id == a.identity.NodeID { // measure our own now
			if ev, err := (&telemetry.MemorySampler{NodeID: id}).Sample(context.Background()); err == nil {
				if m, ok := ev.(state.NodeMemoryMeasured); ok && m.Memory.RAMAvailable != nil {
					return m.Memory.RAMAvailable.InBytes
				}
			}
		}
		return 0
	}
	if len(named) > 0 {
		var out []placement.Node
		for _, id := range named {
			if _, ok := st.NodeIdentities[id]; !ok && id != a.identity.NodeID {
				return nil, fmt.Errorf("%w: node %s is not a member of this cluster", api.ErrModelNotFound, id)
			}
			if slices.ContainsFunc(out, func(n placement.Node) bool { return n.ID == id }) {
				return nil, fmt.Errorf("node %s named twice", id)
			}
			out = append(out, placement.Node{ID: id, Available: avail(id)})
		}
		return out, nil
	}
	var out []placement.Node
	for id := range st.NodeIdentities {
		out = append(out, placement.Node{ID: id, Available: avail(id)})
	}
	if _, ok := st.NodeIdentities[a.identity.NodeID]; !ok {
		out = append(out, placement.Node{ID: a.identity.NodeID, Available: avail(a.identity.NodeID)})
	}
	// This node's own list is read from disk: the replicated one can lag
	// behind (e.g. just after a master change replaced the state).
	self, _ := a.models.Find(modelID)
	has := func(id string) bool {
		if id == a.identity.NodeID {
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

// memoryKnown waits (at most memoryWait) until the state holds a memory
// sample of every node named (or every member): a node that just joined
// has none yet, and placing it would count its memory as 0.
func (a *Agent) memoryKnown(named []string) state.State {
	deadline := time.Now().Add(memoryWait)
	for {
		st := a.store.State()
		ids := named
		if len(ids) == 0 {
			ids = []string{a.identity.NodeID} // this node's own entry can lag too
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
// cluster (this node must have the model: the API forwards otherwise).
func (v inference) Previews(modelID string) (api.PreviewsResponse, error) {
	e, l, err := v.a.layout(modelID)
	if err != nil {
		return api.PreviewsResponse{}, err
	}
	nodes, err := v.a.candidates(modelID, nil)
	if err != nil {
		return api.PreviewsResponse{}, err
	}
	var total uint64
	for _, b := range l.Block {
		total += b
	}
	return api.PreviewsResponse{Model: modelID, Layers: l.Layers, ModelBytes: uint64(e.SizeBytes), ContextLen: l.ContextLen,
		Previews: placement.Previews(l, nodes)}, nil
}

// Place creates an instance of a model that is on this node: on the
// ranks, nodes or node the request names, else the best placement.
func (v inference) Place(ctx context.Context, req api.PlaceRequest) (state.Instance, error) {
	a := v.a
	_, l, err := a.layout(req.Model)
	if err != nil {
		return state.Instance{}, err
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
		nodes, err := a.candidates(req.Model, named)
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
		nodes, err := a.candidates(req.Model, named)
		if err != nil {
			return state.Instance{}, err
		}
		if ranks, err = placement.Split(l, nodes); err != nil {
			return state.Instance{}, placeErr(err)
		}
	default:
		nodes, err := a.candidates(req.Model, nil)
		if err != nil {
			return state.Instance{}, err
		}
		if ranks, err = placement.Best(l, nodes); err != nil {
			return state.Instance{}, placeErr(err)
		}
	}
	st := a.store.State()
	for id, in := range st.Instances {
		if in.ModelID == req.Model && in.Status != state.InstanceStatusFailed && sameNodes(in.Ranks, ranks) {
			return state.Instance{}, fmt.Errorf("%w: %s already runs on these nodes as instance %s", api.ErrConflict, req.Model, id)
		}
	}
	var b [4]byte
	rand.Read(b[:])
	in := state.Instance{InstanceID: "inst-" + hex.EncodeToString(b[:]), ModelID: req.Model, NodeID: a.identity.NodeID,
		CreatedAt: time.Now().UTC(), Status: state.InstanceStatusActive}
	for _, r := range ranks {
		in.Ranks = append(in.Ranks, state.ShardRange{Rank: r.Rank, NodeID: r.NodeID, FirstLayer: r.FirstLayer, LastLayer: r.LastLayer})
	}
	if err := a.seq.Publish(state.InstanceCreated{NodeID: a.identity.NodeID, Instance: in}); err != nil {
		return state.Instance{}, fmt.Errorf("publish instance: %w", err)
	}
	if err := a.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[in.InstanceID]; return ok }); err != nil {
		return state.Instance{}, fmt.Errorf("instance %s: not in the state after %v: %w", in.InstanceID, placeWait, err)
	}
	a.log.Info("instance placed", "instance", in.InstanceID, "model", req.Model, "ranks", len(in.Ranks))
	return in, nil
}

func placeErr(err error) error {
	if errors.Is(err, placement.ErrNoFit) {
		return fmt.Errorf("%w: %v", api.ErrNoMemory, err)
	}
	return fmt.Errorf("%w: %v", runner.ErrBadRequest, err)
}

func sameNodes(a []state.ShardRange, b []placement.Rank) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].NodeID != b[i].NodeID {
			return false
		}
	}
	return true
}

func gib(n uint64) float64 { return float64(n) / (1 << 30) }

// Delete stops the instance's runners (Shutdown) and removes it; ranks on
// other nodes stop when they see it gone.
func (v inference) Delete(ctx context.Context, instanceID string) error {
	a := v.a
	in, ok := a.store.State().Instances[instanceID]
	if !ok || in.NodeID != a.identity.NodeID {
		return fmt.Errorf("%w: instance %s", api.ErrNotHere, instanceID)
	}
	a.sup.Stop(instanceID)
	if err := a.seq.Publish(state.InstanceDeleted{NodeID: a.identity.NodeID, InstanceID: instanceID}); err != nil {
		return fmt.Errorf("publish instance deletion: %w", err)
	}
	if err := a.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[instanceID]; return !ok }); err != nil {
		return fmt.Errorf("instance %s: still in the state after %v: %w", instanceID, placeWait, err)
	}
	a.log.Info("instance deleted", "instance", instanceID)
	return nil
}

// Complete runs a completion on this node's rank 0 and, when traced,
// ships its spans to the master and announces the task with every rank
// (the other ranks' nodes ship theirs).
func (v inference) Complete(ctx context.Context, instanceID, traceID string, req runner.Request, onPiece func(runner.Piece) error) (*runner.Done, error) {
	a := v.a
	done, err := a.sup.Complete(ctx, instanceID, runner.CompletionRequest{Request: req, TraceID: traceID}, onPiece)
	if traceID != "" {
		var spans []trace.Span
		errText := ""
		if done != nil {
			spans = done.Spans
		}
		if err != nil {
			errText = err.Error()
		}
		var ranks []wire.TraceRank
		if in, ok := a.store.State().Instances[instanceID]; ok {
			for _, rk := range in.Ranks {
				ranks = append(ranks, wire.TraceRank{Rank: rk.Rank, Node: rk.NodeID})
			}
		}
		a.shipTrace(traceID, "chat", spans, ranks, errText)
	}
	if err != nil && done != nil && len(done.Spans) == 0 && done.CompletionTokens == 0 {
		done = nil
	}
	return done, err
}

// shipTrace sends rank 0's spans of a task to the master and announces
// the task with its ranks (rank 0 here when ranks is empty), off the
// request's goroutine.
func (a *Agent) shipTrace(task, kind string, spans []trace.Span, ranks []wire.TraceRank, errText string) {
	if len(ranks) == 0 {
		ranks = []wire.TraceRank{{Rank: 0, Node: a.identity.NodeID}}
	}
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sh := a.newShipper(task, ranks[0].Rank)
		sh.Add(spans...)
		if err := sh.Finish(ctx); err != nil {
			a.log.Warn("ship trace", "task", task, "err", err)
		}
		t := &wire.TraceTask{Task: task, Kind: kind, Ranks: ranks, Error: truncate(errText, 1024)}
		if _, err := a.node.ShipTrace(ctx, t); err != nil {
			a.log.Warn("announce trace", "task", task, "err", err)
		}
	}()
}

// onLoaded traces a rank's load as its own task, load-<instance>-r<rank>.
func (a *Agent) onLoaded(in state.Instance, rank int, spans []trace.Span) {
	for i := range spans {
		spans[i].Rank = 0 // one-rank task; the name says which rank
	}
	a.shipTrace(fmt.Sprintf("load-%s-r%d", in.InstanceID, rank), "load", spans, nil, "")
}

// waitState waits until cond holds for this node's state.
func (a *Agent) waitState(ctx context.Context, cond func(state.State) bool) error {
	ctx, cancel := context.WithTimeout(ctx, placeWait)
	defer cancel()
	log := a.store.Log()
	for {
		next := log.Next()
		if cond(a.store.State()) {
			return nil
		}
		if err := log.Wait(ctx, next); err != nil {
			return err
		}
	}
}

// reconcile keeps the supervisor's runners in line with the state.
func (a *Agent) reconcile(ctx context.Context) {
	log := a.store.Log()
	for {
		next := log.Next()
		st := a.store.State()
		a.sup.Reconcile(st)
		a.watchFailures(st)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		log.Wait(wctx, next)
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// modelsSampler publishes this node's model list when it changes (and
// every 10 scans regardless).
type modelsSampler struct {
	nodeID string
	scan   *model.Scanner

	mu   sync.Mutex // guards last and n: Sample also runs on master changes
	last []state.ModelInfo
	n    int
}

func (m *modelsSampler) Name() string { return "models" }

// publishModels publishes the model list now, whether or not it changed:
// a new master must learn it.
func (a *Agent) publishModels() {
	ev := a.modelsSampler.list()
	if err := a.seq.Publish(ev); err != nil {
		a.log.Warn("publish models", "err", err)
	}
}

func (m *modelsSampler) Sample(context.Context) (state.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	ev := m.listLocked()
	if m.last != nil && slices.EqualFunc(ev.Models.Models, m.last, func(a, b state.ModelInfo) bool { return a == b }) && m.n%10 != 0 {
		return nil, nil
	}
	m.last = ev.Models.Models
	return ev, nil
}

func (m *modelsSampler) list() state.NodeModelsMeasured {
	m.mu.Lock()
	defer m.mu.Unlock()
	ev := m.listLocked()
	m.last = ev.Models.Models
	return ev
}

func (m *modelsSampler) listLocked() state.NodeModelsMeasured {
	var ms []state.ModelInfo
	for _, e := range m.scan.Scan() {
		ms = append(ms, state.ModelInfo{ID: e.ID, Source: e.Source, Path: e.Path, Size: state.Bytes(uint64(e.SizeBytes)),
			Arch: e.Arch, Layers: e.Layers, Quantization: e.Quantization, Params: e.Params, ContextLen: e.ContextLen, Error: e.Error})
	}
	if ms == nil {
		ms = []state.ModelInfo{}
	}
	return state.NodeModelsMeasured{NodeID: m.nodeID, Models: state.NodeModels{Models: ms, SampledAt: time.Now().UTC()}}
}

// streamListener turns the peer stream links the cluster hands over into
// a net.Listener for the peer API's http.Server.
type streamListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func newStreamListener(addr net.Addr) *streamListener {
	return &streamListener{ch: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// offer hands c to Accept, or closes it when the listener is closed.
func (l *streamListener) offer(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *streamListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *streamListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *streamListener) Addr() net.Addr { return l.addr }

// peerTransport reaches http://<node id>/… over a stream link to that node.
func (a *Agent) peerTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if err := state.ValidNodeID(host); err != nil {
				return nil, fmt.Errorf("peer %q: %w", host, err)
			}
			return a.node.DialStream(ctx, host, wire.StreamHTTP, "")
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
}

var errNoExe = errors.New("cannot find the orrery binary to start runners with")
