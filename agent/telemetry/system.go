package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/load"

	"github.com/orrery-cluster/orrery/agent/state"
)

// CPULayout says which logical CPUs belong to the performance and efficiency
// clusters. Both empty on machines without such clusters.
type CPULayout struct {
	Perf, Eff []int
}

// SystemSampler reads CPU usage (overall and per cluster), load averages and
// the OS-specific sensors (GPU, temperature, power).
type SystemSampler struct {
	NodeID string
	Layout CPULayout

	sensors sensorSource
	prev    []cpu.TimesStat // per-CPU times of the previous sample
}

// NewSystemSampler makes a sampler with this OS's sensors and CPU layout.
// Close releases the sensors.
func NewSystemSampler(nodeID string, log *slog.Logger) *SystemSampler {
	return &SystemSampler{NodeID: nodeID, Layout: cpuLayout(), sensors: newSensorSource(log)}
}

func (*SystemSampler) Name() string { return "system" }

// Close releases OS handles held by the sensors.
func (s *SystemSampler) Close() error {
	if s.sensors == nil {
		return nil
	}
	return s.sensors.Close()
}

func (s *SystemSampler) Sample(ctx context.Context) (state.Event, error) {
	var sys state.NodeSystem
	if times, err := cpu.TimesWithContext(ctx, true); err == nil {
		if s.prev != nil {
			sys.CPUUsage, sys.PCPUUsage, sys.ECPUUsage = cpuUsage(s.prev, times, s.Layout)
		}
		s.prev = times
	}
	if avg, err := load.AvgWithContext(ctx); err == nil {
		sys.Load1, sys.Load5, sys.Load15 = state.Float(avg.Load1), state.Float(avg.Load5), state.Float(avg.Load15)
	}
	if s.sensors != nil {
		if r, err := s.sensors.Read(); err == nil {
			sys.GPUUsage, sys.Temp, sys.TempSource = r.GPUUsage, r.Temp, r.TempSource
			sys.SysPower, sys.PowerSource = r.SysPower, r.PowerSource
		}
	}
	sys.SampledAt = time.Now().UTC()
	return state.NodeSystemMeasured{NodeID: s.NodeID, System: sys}, nil
}

// cpuUsage computes busy fractions between two per-CPU samples: overall, and
// for the perf and eff clusters when the layout names them. A CPU set whose
// counters did not advance yields nil.
func cpuUsage(prev, cur []cpu.TimesStat, layout CPULayout) (all, perf, eff *float64) {
	if len(prev) != len(cur) {
		return nil, nil, nil // CPUs came or went (hotplug): skip one sample
	}
	busy := make([]float64, len(cur))
	total := make([]float64, len(cur))
	for i := range cur {
		t := cur[i].Total() - prev[i].Total()
		idle := (cur[i].Idle + cur[i].Iowait) - (prev[i].Idle + prev[i].Iowait)
		if t > 0 {
			busy[i], total[i] = max(0, t-idle), t
		}
	}
	frac := func(idx []int) *float64 {
		var b, t float64
		for _, i := range idx {
			if i >= 0 && i < len(cur) {
				b, t = b+busy[i], t+total[i]
			}
		}
		if t <= 0 {
			return nil
		}
		return state.Float(min(1, b/t))
	}
	allIdx := make([]int, len(cur))
	for i := range allIdx {
		allIdx[i] = i
	}
	all = frac(allIdx)
	if len(layout.Perf) > 0 {
		perf = frac(layout.Perf)
	}
	if len(layout.Eff) > 0 {
		eff = frac(layout.Eff)
	}
	return all, perf, eff
}
