package instance

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/engine/model"
)

// ModelScanInterval is how often the models on disk are scanned.
const ModelScanInterval = 10 * time.Second

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
