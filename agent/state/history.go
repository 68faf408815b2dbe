package state

import (
	"sync"
	"time"
)

// MemorySample is one point of a node's memory sparkline.
type MemorySample struct {
	T             time.Time `json:"t"`
	RAMTotal      *Memory   `json:"ramTotal"`
	RAMAvailable  *Memory   `json:"ramAvailable"`
	SwapTotal     *Memory   `json:"swapTotal"`
	SwapAvailable *Memory   `json:"swapAvailable"`
}

// Limits of MemoryHistory, so that a chatty or hostile peer cannot grow it.
const (
	DefaultHistoryWindow = 10 * time.Minute
	maxHistorySamples    = 6000 // 10 min at 100 ms
	maxHistoryNodes      = 256
)

// MemoryHistory keeps, per node, the memory samples of the last window. It is
// fed from applied events, so every node has every node's history. Safe for
// concurrent use.
type MemoryHistory struct {
	window time.Duration

	mu    sync.Mutex // guards nodes
	nodes map[string][]MemorySample
}

// NewMemoryHistory keeps samples no older than window before the newest one.
func NewMemoryHistory(window time.Duration) *MemoryHistory {
	if window <= 0 {
		window = DefaultHistoryWindow
	}
	return &MemoryHistory{window: window, nodes: map[string][]MemorySample{}}
}

// Add records one sample of node.
func (h *MemoryHistory) Add(node string, m NodeMemory) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.nodes[node]
	if !ok && len(h.nodes) >= maxHistoryNodes {
		return
	}
	s = append(s, MemorySample{T: m.SampledAt, RAMTotal: m.RAMTotal, RAMAvailable: m.RAMAvailable,
		SwapTotal: m.SwapTotal, SwapAvailable: m.SwapAvailable})
	cut := 0
	oldest := m.SampledAt.Add(-h.window)
	for cut < len(s) && s[cut].T.Before(oldest) {
		cut++
	}
	if over := len(s) - cut - maxHistorySamples; over > 0 {
		cut += over
	}
	h.nodes[node] = s[cut:]
}

// Get returns a copy of node's samples, oldest first, and whether the node
// has any.
func (h *MemoryHistory) Get(node string) ([]MemorySample, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.nodes[node]
	if !ok {
		return nil, false
	}
	return append([]MemorySample(nil), s...), true
}
