package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Model serving on this node: the model scan, the runner supervisor, the
// api.Inference the API calls, the peer API that other nodes forward to,
// and the traces of requests and loads.

// ModelScanInterval is how often the models on disk are scanned.
const ModelScanInterval = 30 * time.Second

// placeWait bounds how long POST /instance waits for its event to come
// back from the master into this node's state.
const placeWait = 5 * time.Second

type inference struct{ a *Agent }

var _ api.Inference = inference{}

func (v inference) Peer() *http.Client { return v.a.peerHTTP }

// Route prefers an instance on this node, then one whose runner is ready.
func (v inference) Route(modelID string) (string, string, error) {
	st := v.a.store.State()
	type cand struct {
		id, node string
		score    int
	}
	var cs []cand
	for id, in := range st.Instances {
		if in.ModelID != modelID {
			continue
		}
		c := cand{id: id, node: in.NodeID}
		if in.NodeID == v.a.identity.NodeID {
			c.score += 2
		}
		if r, ok := st.Runners[id+"-0"]; ok && (r.Status == state.RunnerReady || r.Status == state.RunnerRunning) {
			c.score += 4
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return "", "", fmt.Errorf("%w: %q has no instance; place one with POST /instance {\"model\": %q} (running: %s)",
			api.ErrModelNotRunning, modelID, modelID, runningModels(st))
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].score != cs[j].score {
			return cs[i].score > cs[j].score
		}
		return cs[i].id < cs[j].id
	})
	return cs[0].id, cs[0].node, nil
}

func runningModels(st state.State) string {
	var ids []string
	for _, in := range st.Instances {
		if !slices.Contains(ids, in.ModelID) {
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
	if _, ok := v.a.models.Find(modelID); ok || has(v.a.identity.NodeID) {
		return v.a.identity.NodeID, nil
	}
	nodes := make([]string, 0, len(st.NodeModels))
	for n := range st.NodeModels {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		if has(n) {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w: no node has a model %q (see GET /v1/models, or orrery models ls on each machine)", api.ErrModelNotFound, modelID)
}

// Place creates an instance of a model on this node, after checking that
// the model is here and fits in the memory available.
func (v inference) Place(ctx context.Context, modelID string) (state.Instance, error) {
	a := v.a
	e, ok := a.models.Find(modelID)
	if !ok {
		return state.Instance{}, fmt.Errorf("%w: %q is not on node %s (see orrery models ls)", api.ErrModelNotFound, modelID, a.identity.NodeID)
	}
	if e.Error != "" {
		return state.Instance{}, fmt.Errorf("%w: %s cannot run here: %s", api.ErrModelNotFound, modelID, e.Error)
	}
	st := a.store.State()
	for id, in := range st.Instances {
		if in.ModelID == modelID && in.NodeID == a.identity.NodeID {
			return state.Instance{}, fmt.Errorf("%w: %s already runs on this node as instance %s", api.ErrConflict, modelID, id)
		}
	}
	if m, ok := st.NodeMemory[a.identity.NodeID]; ok && m.RAMAvailable != nil {
		// Weights plus a margin for the KV cache and compute buffers.
		need := uint64(e.SizeBytes) + uint64(e.SizeBytes)/10 + 64<<20
		if need > m.RAMAvailable.InBytes {
			return state.Instance{}, fmt.Errorf("%w: %s needs about %.2f GiB (%.2f GiB of weights + 10%% + 64 MiB), node %s has %.2f GiB available",
				api.ErrNoMemory, modelID, gib(need), gib(uint64(e.SizeBytes)), a.identity.NodeID, gib(m.RAMAvailable.InBytes))
		}
	}
	var b [4]byte
	rand.Read(b[:])
	in := state.Instance{InstanceID: "inst-" + hex.EncodeToString(b[:]), ModelID: modelID, NodeID: a.identity.NodeID,
		Ranks:     []state.ShardRange{{Rank: 0, NodeID: a.identity.NodeID, FirstLayer: 0, LastLayer: e.Layers}},
		CreatedAt: time.Now().UTC()}
	if err := a.seq.Publish(state.InstanceCreated{NodeID: a.identity.NodeID, Instance: in}); err != nil {
		return state.Instance{}, fmt.Errorf("publish instance: %w", err)
	}
	if err := a.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[in.InstanceID]; return ok }); err != nil {
		return state.Instance{}, fmt.Errorf("instance %s: not in the state after %v: %w", in.InstanceID, placeWait, err)
	}
	a.log.Info("instance placed", "instance", in.InstanceID, "model", modelID, "layers", e.Layers)
	return in, nil
}

func gib(n uint64) float64 { return float64(n) / (1 << 30) }

// Delete stops the instance's runner (Shutdown) and removes it.
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

// Complete runs a completion on this node's runner and, when traced,
// ships its spans to the master as one trace.
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
		a.shipTrace(traceID, "chat", spans, errText)
	}
	return done, err
}

// shipTrace sends one rank-0 task's spans to the master, off the
// request's goroutine.
func (a *Agent) shipTrace(task, kind string, spans []trace.Span, errText string) {
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sh := a.newShipper(task, 0)
		sh.Add(spans...)
		if err := sh.Finish(ctx); err != nil {
			a.log.Warn("ship trace", "task", task, "err", err)
		}
		t := &wire.TraceTask{Task: task, Kind: kind, Ranks: []wire.TraceRank{{Rank: 0, Node: a.identity.NodeID}}, Error: truncate(errText, 1024)}
		if _, err := a.node.ShipTrace(ctx, t); err != nil {
			a.log.Warn("announce trace", "task", task, "err", err)
		}
	}()
}

// onLoaded traces a runner's load as its own task, load-<instance>-<n>.
func (a *Agent) onLoaded(in state.Instance, n int, spans []trace.Span) {
	a.shipTrace(fmt.Sprintf("load-%s-%d", in.InstanceID, n), "load", spans, "")
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
		a.sup.Reconcile(a.store.State())
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
			return a.node.DialStream(ctx, host, wire.StreamHTTP)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
}

var errNoExe = errors.New("cannot find the orrery binary to start runners with")
