package state

import (
	"sync"
	"time"
)

// MemorySample is one point of a node's memory sparkline.
type MemorySample struct {
	T             time.Time `json:"t"`
	RAMTotal      *Memory   `json:"ramTotal,omitempty"`
	RAMAvailable  *Memory   `json:"ramAvailable,omitempty"`
	SwapTotal     *Memory   `json:"swapTotal,omitempty"`
	SwapAvailable *Memory   `json:"swapAvailable,omitempty"`
}

// Limits of MemoryHistory, so that a chatty or hostile peer cannot grow it.
const (
	DefaultHistoryWindow = 10 * time.Minute
	maxHistorySamples    = 6000 // 10 min at 100 ms
	maxHistoryNodes      = 256
)

// series keeps, per node, the samples of the last window before the newest
// one, at most maxHistorySamples each and for at most maxHistoryNodes
// nodes, so that a chatty or hostile peer cannot grow it. Safe for
// concurrent use. MemoryHistory and SystemHistory are series.
type series[S any] struct {
	window time.Duration
	at     func(S) time.Time

	mu    sync.Mutex // guards nodes
	nodes map[string][]S
}

func newSeries[S any](window time.Duration, at func(S) time.Time) series[S] {
	if window <= 0 {
		window = DefaultHistoryWindow
	}
	return series[S]{window: window, at: at, nodes: map[string][]S{}}
}

func (h *series[S]) add(node string, sample S) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.nodes[node]
	if !ok && len(h.nodes) >= maxHistoryNodes {
		return
	}
	s = append(s, sample)
	cut := 0
	oldest := h.at(sample).Add(-h.window)
	for cut < len(s) && h.at(s[cut]).Before(oldest) {
		cut++
	}
	if over := len(s) - cut - maxHistorySamples; over > 0 {
		cut += over
	}
	h.nodes[node] = s[cut:]
}

// get returns a copy of node's samples, oldest first, and whether the node
// has any.
func (h *series[S]) get(node string) ([]S, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.nodes[node]
	if !ok {
		return nil, false
	}
	return append([]S(nil), s...), true
}

// MemoryHistory keeps, per node, the memory samples of the last window. It is
// fed from applied events, so every node has every node's history.
type MemoryHistory struct{ s series[MemorySample] }

// NewMemoryHistory keeps samples no older than window before the newest one.
func NewMemoryHistory(window time.Duration) *MemoryHistory {
	return &MemoryHistory{newSeries(window, func(m MemorySample) time.Time { return m.T })}
}

// Add records one sample of node.
func (h *MemoryHistory) Add(node string, m NodeMemory) {
	h.s.add(node, MemorySample{T: m.SampledAt, RAMTotal: m.RAMTotal, RAMAvailable: m.RAMAvailable,
		SwapTotal: m.SwapTotal, SwapAvailable: m.SwapAvailable})
}

// Get returns a copy of node's samples, oldest first, and whether the node
// has any.
func (h *MemoryHistory) Get(node string) ([]MemorySample, bool) { return h.s.get(node) }

// PowerSample is one power reading of a node: nil where the OS gives none.
type PowerSample struct {
	T time.Time
	W *float64
}

// SystemSample is one point of a node's CPU/GPU/temperature/power history;
// nil where the OS gives no value.
type SystemSample struct {
	T        time.Time `json:"t"`
	CPUUsage *float64  `json:"cpuUsage,omitempty"`
	GPUUsage *float64  `json:"gpuUsage,omitempty"`
	Temp     *float64  `json:"temp,omitempty"`
	SysPower *float64  `json:"sysPower,omitempty"`
}

// SystemHistory keeps, per node, the system samples of the last window:
// the Node page's sparklines, and energy per request. Fed from applied
// NodeSystemMeasured events.
type SystemHistory struct{ s series[SystemSample] }

// NewSystemHistory keeps samples no older than window before the newest one.
func NewSystemHistory(window time.Duration) *SystemHistory {
	return &SystemHistory{newSeries(window, func(s SystemSample) time.Time { return s.T })}
}

// Add records one sample of node.
func (h *SystemHistory) Add(node string, s NodeSystem) {
	h.s.add(node, SystemSample{T: s.SampledAt, CPUUsage: s.CPUUsage, GPUUsage: s.GPUUsage, Temp: s.Temp, SysPower: s.SysPower})
}

// Get returns a copy of node's samples, oldest first, and whether the node
// has any.
func (h *SystemHistory) Get(node string) ([]SystemSample, bool) { return h.s.get(node) }

// Power returns node's power readings, oldest first.
func (h *SystemHistory) Power(node string) []PowerSample {
	ss, _ := h.s.get(node)
	out := make([]PowerSample, len(ss))
	for i, s := range ss {
		out[i] = PowerSample{T: s.T, W: s.SysPower}
	}
	return out
}

// Energy integrates power over [t0, t1] with the trapezoid rule. The power
// at t0 and t1 is interpolated between the samples around them; past the
// last sample (a request that just ended, before the next reading) the last
// value holds. ok is false when there is no sample at or before t1, or a
// sample the window needs has no value: unknown energy is never 0.
func Energy(samples []PowerSample, t0, t1 time.Time) (joules float64, ok bool) {
	if !t1.After(t0) {
		return 0, false
	}
	// at returns the power at t, interpolated or held.
	at := func(t time.Time) (float64, bool) {
		i := 0
		for i < len(samples) && !samples[i].T.After(t) {
			i++
		}
		// samples[i-1].T <= t < samples[i].T
		switch {
		case i == 0:
			return 0, false // no reading yet at t
		case i == len(samples):
			p := samples[i-1]
			if p.W == nil {
				return 0, false
			}
			return *p.W, true
		}
		a, b := samples[i-1], samples[i]
		if a.W == nil || b.W == nil {
			return 0, false
		}
		f := float64(t.Sub(a.T)) / float64(b.T.Sub(a.T))
		return *a.W + f*(*b.W-*a.W), true
	}
	pts := []struct {
		t time.Time
		w float64
	}{}
	w0, ok0 := at(t0)
	if !ok0 {
		// The first reading may come just after t0 (a node that just
		// started): hold it backwards only if it is close.
		if len(samples) == 0 || samples[0].W == nil || samples[0].T.After(t1) || samples[0].T.Sub(t0) > 2*time.Second {
			return 0, false
		}
		w0 = *samples[0].W
	}
	pts = append(pts, struct {
		t time.Time
		w float64
	}{t0, w0})
	for _, s := range samples {
		if s.T.After(t0) && s.T.Before(t1) {
			if s.W == nil {
				return 0, false
			}
			pts = append(pts, struct {
				t time.Time
				w float64
			}{s.T, *s.W})
		}
	}
	w1, ok1 := at(t1)
	if !ok1 {
		return 0, false
	}
	pts = append(pts, struct {
		t time.Time
		w float64
	}{t1, w1})
	for i := 1; i < len(pts); i++ {
		joules += (pts[i].w + pts[i-1].w) / 2 * pts[i].t.Sub(pts[i-1].t).Seconds()
	}
	return joules, true
}

// NodesEnergy is the energy of several nodes over [t0, t1] (each node once)
// and its mean power, from each node's power samples; ok is false when any
// node's energy is unknown, or the window is empty.
func NodesEnergy(nodes []string, power func(node string) []PowerSample, t0, t1 time.Time) (joules, watts float64, ok bool) {
	if len(nodes) == 0 || !t1.After(t0) {
		return 0, 0, false
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n] {
			continue
		}
		seen[n] = true
		e, ok := Energy(power(n), t0, t1)
		if !ok {
			return 0, 0, false
		}
		joules += e
	}
	return joules, joules / t1.Sub(t0).Seconds(), true
}
