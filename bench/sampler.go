package bench

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
)

// sampler polls the cluster's memory (always: peak memory) and system
// metrics (unless off) every interval, stamping samples with this
// machine's clock, which the run windows use too.
type sampler struct {
	c        *client.Client
	interval time.Duration
	system   bool

	mu     sync.Mutex // guards the fields below
	mem    map[string][]memPoint
	sys    map[string][]state.NodeSystem
	power  map[string][]state.PowerSample
	lastAt map[string]time.Time // last sampledAt seen per node
}

type memPoint struct {
	t    time.Time
	used uint64
}

func newSampler(c *client.Client, interval time.Duration, system bool) *sampler {
	return &sampler{c: c, interval: interval, system: system, mem: map[string][]memPoint{},
		sys: map[string][]state.NodeSystem{}, power: map[string][]state.PowerSample{}, lastAt: map[string]time.Time{}}
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sampleMemory(ctx)
		if s.system {
			s.sampleSystem(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sampleMemory(ctx context.Context) {
	now := time.Now()
	mem, err := s.c.NodeMemory(ctx)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, m := range mem {
		if m.RAMTotal != nil && m.RAMAvailable != nil {
			s.mem[id] = append(s.mem[id], memPoint{now, m.RAMTotal.InBytes - min(m.RAMAvailable.InBytes, m.RAMTotal.InBytes)})
		}
	}
}

func (s *sampler) sampleSystem(ctx context.Context) {
	now := time.Now()
	sys, err := s.c.NodeSystem(ctx)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, v := range sys {
		if v.SampledAt.Equal(s.lastAt[id]) {
			continue // no new reading since the last poll
		}
		s.lastAt[id] = v.SampledAt
		s.sys[id] = append(s.sys[id], v)
		s.power[id] = append(s.power[id], state.PowerSample{T: now, W: v.SysPower})
	}
}

// peakMemory is the most memory each node used during [a, b]: the
// samples inside it and the nearest one on either side (bench samples right
// before and after each run, so short runs are bracketed).
func (s *sampler) peakMemory(nodes []string, a, b time.Time) map[string]state.Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]state.Memory{}
	for _, id := range nodes {
		var peak uint64
		seen := false
		pts := s.mem[id]
		for i, p := range pts {
			before := !p.t.After(a) && (i+1 == len(pts) || pts[i+1].t.After(a))
			inside := p.t.After(a) && !p.t.After(b)
			after := p.t.After(b) && (i == 0 || !pts[i-1].t.After(b))
			if before || inside || after {
				peak = max(peak, p.used)
				seen = true
			}
		}
		if seen {
			out[id] = state.Memory{InBytes: peak}
		}
	}
	return out
}

// energy is the nodes' energy over [a, b] and its mean power; nil unless
// every node's power is known.
func (s *sampler) energy(nodes []string, a, b time.Time) (j, w *float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	joules, watts, ok := state.NodesEnergy(nodes, func(id string) []state.PowerSample { return s.power[id] }, a, b)
	if !ok {
		return nil, nil
	}
	joules, watts = round3(joules), round3(watts)
	return &joules, &watts
}

// summary is min/max/mean per node of every metric that had a value.
func (s *sampler) summary() map[string]map[string]MetricsSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]MetricsSummary{}
	for id, vs := range s.sys {
		m := map[string]MetricsSummary{}
		for name, get := range map[string]func(state.NodeSystem) *float64{
			"gpuUsage": func(v state.NodeSystem) *float64 { return v.GPUUsage },
			"temp":     func(v state.NodeSystem) *float64 { return v.Temp },
			"sysPower": func(v state.NodeSystem) *float64 { return v.SysPower },
			"cpuUsage": func(v state.NodeSystem) *float64 { return v.CPUUsage },
		} {
			var xs []float64
			for _, v := range vs {
				if p := get(v); p != nil {
					xs = append(xs, *p)
				}
			}
			if len(xs) == 0 {
				continue
			}
			m[name] = MetricsSummary{Min: round3(slices.Min(xs)), Max: round3(slices.Max(xs)), Mean: round3(Mean(xs)), Samples: len(xs)}
		}
		out[id] = m
	}
	return out
}
