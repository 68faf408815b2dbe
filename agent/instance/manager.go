// Package instance places, routes and runs model instances on this node:
// it implements api.Inference. An instance is placed by the node that has
// the model (its owner), which splits the model's blocks over ranks on
// member nodes; every node's supervisor then starts the runners of its own
// ranks, and requests are routed to the node of rank 0.
package instance

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/modelstore"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// placeWait bounds how long a placement or deletion waits for its event to
// come back from the master into this node's state.
const placeWait = 5 * time.Second

// Config wires a Manager. Every field is required but ContextLen and
// Logger.
type Config struct {
	// Self is this node's id.
	Self string
	// RAMLimit, when not 0, caps the RAM this node offers (agent.Config's).
	RAMLimit uint64
	// DirectLinks says tensor-parallel groups placed here link their
	// ranks directly (agent.Config's): the cost model counts no relay.
	DirectLinks bool
	// Store is this node's replicated state; Publish sends an event to
	// the master for sequencing.
	Store   *state.Store
	Publish func(state.Event) error
	// Models finds the models on this node's disk.
	Models *modelstore.Scanner
	// Runners runs this node's ranks.
	Runners *supervisor.Supervisor
	// Peer reaches other nodes' peer APIs as http://<node id>/….
	Peer *http.Client
	// ContextLen is the runners' context length (0: each model's own);
	// placement sizes the KV cache with it.
	ContextLen int
	// Parallel is how many requests the instances this node places serve
	// at once (0: 1).
	Parallel int
	// KeepAlive is how long an instance placed on demand stays loaded
	// after its last request when the request does not say (nil:
	// api.DefaultKeepAlive).
	KeepAlive *api.KeepAlive
	// ShipTrace ships rank 0's spans of a traced task to the master and
	// announces the task with its ranks. It must not block.
	ShipTrace func(task, kind string, spans []trace.Span, counters []trace.CounterSample, ranks []state.ShardRange, errText string)
	// Sources, when set, lets this node place an hf.co model that no
	// node has: its ranks then pull their shards from the hub.
	Sources Sources
	// Owned, when set, lists the instances this node owns by its own
	// record: one restored from disk at start counts as live for Place
	// before the state has it again (nil: the state alone).
	Owned  func() []state.Instance
	Logger *slog.Logger
}

// Sources (pull.Puller) tells the model ids that name a source (hf.co
// references), resolves one to its file there, and reads its header.
type Sources interface {
	IsSource(id string) bool
	Resolve(ctx context.Context, ref string) (state.ModelSource, error)
	Header(ctx context.Context, src state.ModelSource) (*gguf.File, int64, error)
}

// Manager is this node's part of serving models. Safe for concurrent use.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	models *modelsSampler

	placeMu  sync.Mutex // serialises placing on demand and replacing failed instances
	createMu sync.Mutex // serialises Place's check for a conflict and its creation
	failMu   sync.Mutex // guards failSeen
	failSeen map[string]time.Time
	vocabs   vocabCache // tokenizers for /tokenize
	holds    holds      // requests running on instances whose rank 0 is here
	reduces  reduceSeen // all-reduces measured by tensor-parallel groups, by node set
}

var _ api.Inference = (*Manager)(nil)

// New returns a Manager; Run keeps the runners in line with the state.
func New(cfg Config) *Manager {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, log: log.With("component", "instance"), failSeen: map[string]time.Time{},
		models: &modelsSampler{nodeID: cfg.Self, scan: cfg.Models}}
}

// Peer is the client for other nodes' peer APIs (api.Inference).
func (m *Manager) Peer() *http.Client { return m.cfg.Peer }

// Run keeps the supervisor's runners in line with the state, and marks
// this node's instances Failed when a rank fails, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	log := m.cfg.Store.Log()
	seen := log.Next()
	for {
		next := log.Next()
		seen = m.noteDeletions(log, seen, next)
		st := m.cfg.Store.State()
		m.cfg.Runners.Reconcile(st)
		m.watchFailures(st)
		m.reap(ctx, st, time.Now())
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		log.Wait(wctx, next)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// noteDeletions tells the supervisor of the instances deleted by events
// [from, to) of the log, so that it stops their runners at once (an
// instance missing for another reason may be coming back). Events a
// snapshot skipped are not there: their runners stop after the grace.
// It returns where it got to.
func (m *Manager) noteDeletions(log *state.Log, from, to int64) int64 {
	if from >= to {
		return to
	}
	evs, err := log.Since(from, int(to-from))
	if err != nil {
		return to // compacted, or reset by a snapshot
	}
	var ids []string
	for _, ie := range evs {
		if d, ok := ie.Event.(state.InstanceDeleted); ok {
			ids = append(ids, d.InstanceID)
		}
	}
	if len(ids) > 0 {
		m.cfg.Runners.Deleted(ids...)
	}
	return to
}

// waitState waits (at most placeWait) until cond holds for this node's
// state.
func (m *Manager) waitState(ctx context.Context, cond func(state.State) bool) error {
	ctx, cancel := context.WithTimeout(ctx, placeWait)
	defer cancel()
	log := m.cfg.Store.Log()
	for {
		next := log.Next()
		if cond(m.cfg.Store.State()) {
			return nil
		}
		if err := log.Wait(ctx, next); err != nil {
			return err
		}
	}
}

// truncate cuts s to at most n bytes, for error texts that go into events.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
