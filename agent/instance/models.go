package instance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/engine/modelstore"
)

// ModelScanInterval is how often the models on disk are scanned.
const ModelScanInterval = 10 * time.Second

// modelsSampler publishes this node's model list when it changes (and
// every 10 scans regardless).
type modelsSampler struct {
	nodeID string
	scan   *modelstore.Scanner

	mu   sync.Mutex // guards last and n: Sample also runs on master changes
	last []state.ModelInfo
	n    int
}

func (m *modelsSampler) Name() string { return "models" }

// ModelsSampler is the telemetry sampler of this node's model list, run
// every ModelScanInterval.
func (m *Manager) ModelsSampler() telemetry.Sampler { return m.models }

// PublishModels publishes the model list now, whether or not it changed:
// a new master must learn it.
func (m *Manager) PublishModels() {
	ev := m.models.list()
	if err := m.cfg.Publish(ev); err != nil {
		m.log.Warn("publish models", "err", err)
	}
}

func (m *modelsSampler) Sample(context.Context) (state.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	ev := m.listLocked()
	// Deep: Size and Defaults are pointers, fresh on every scan.
	if m.last != nil && reflect.DeepEqual(ev.Models.Models, m.last) && m.n%10 != 0 {
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
		mi := state.ModelInfo{ID: e.ID, Source: e.Source, Path: e.Path, Size: state.Bytes(uint64(e.SizeBytes)),
			Arch: e.Arch, Layers: e.Layers, Quantization: e.Quantization, Params: e.Params, ContextLen: e.ContextLen, Pooling: string(e.Pooling), Error: e.Error}
		if d := e.Defaults; d != nil {
			mi.Defaults = &state.ModelDefaults{Temperature: d.Temperature, TopP: d.TopP, TopK: d.TopK, NumPredict: d.NumPredict, Stop: d.Stop}
		}
		ms = append(ms, mi)
	}
	if ms == nil {
		ms = []state.ModelInfo{}
	}
	return state.NodeModelsMeasured{NodeID: m.nodeID, Models: state.NodeModels{Models: ms, SampledAt: time.Now().UTC()}}
}

// DeleteModel removes a model from this node's stores (modelstore.Scanner.
// Remove) and publishes the new list. It refuses while an instance that
// is not failed uses the model here: a rank of it runs here, or this node
// placed it (and serves its shards).
func (m *Manager) DeleteModel(id string) (api.ModelDeleted, error) {
	for iid, in := range m.cfg.Store.State().Instances {
		if in.Status == state.InstanceStatusFailed || in.ModelID != id && (in.Source == nil || in.Source.Model != id) {
			continue
		}
		here := in.NodeID == m.cfg.Self
		for _, rk := range in.Ranks {
			here = here || rk.NodeID == m.cfg.Self
		}
		if here {
			return api.ModelDeleted{}, fmt.Errorf("%w: instance %s uses %s on node %s: delete the instance first", api.ErrConflict, iid, id, m.cfg.Self)
		}
	}
	r, err := m.cfg.Models.Remove(id)
	if errors.Is(err, modelstore.ErrNoModel) {
		return api.ModelDeleted{}, fmt.Errorf("%w: %v", api.ErrModelNotFound, err)
	}
	if len(r.Files) > 0 {
		m.log.Info("model deleted", "model", id, "source", r.Entry.Source, "files", len(r.Files), "freed", r.Freed, "err", err)
		m.PublishModels()
	}
	if err != nil {
		return api.ModelDeleted{}, err
	}
	return api.ModelDeleted{Model: id, Node: m.cfg.Self, Files: r.Files, FreedBytes: r.Freed}, nil
}
