package telemetry

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/orrery-cluster/orrery/internal/testutil"

	"github.com/shirou/gopsutil/v4/cpu"

	"github.com/orrery-cluster/orrery/agent/state"
)

func TestCPUUsageByCluster(t *testing.T) {
	prev := []cpu.TimesStat{{User: 10, Idle: 90}, {User: 10, Idle: 90}, {User: 0, Idle: 100}, {User: 0, Idle: 100}}
	cur := []cpu.TimesStat{
		{User: 20, Idle: 90},            // E: 10 busy of 10
		{User: 10, Idle: 100},           // E: 0 busy of 10
		{User: 5, System: 5, Idle: 100}, // P: 10 busy of 10
		{User: 0, Idle: 105, Iowait: 5}, // P: iowait counts as idle: 0 of 10
	}
	all, perf, eff := cpuUsage(prev, cur, CPULayout{Eff: []int{0, 1}, Perf: []int{2, 3}})
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got < want-1e-9 || *got > want+1e-9 {
			t.Errorf("%s = %v, want %v", name, ptr(got), want)
		}
	}
	check("all", all, 0.5)
	check("eff", eff, 0.5)
	check("perf", perf, 0.5)

	all, perf, eff = cpuUsage(prev, cur, CPULayout{})
	check("all without layout", all, 0.5)
	if perf != nil || eff != nil {
		t.Errorf("no layout but perf=%v eff=%v", ptr(perf), ptr(eff))
	}
	if a, _, _ := cpuUsage(prev, cur[:2], CPULayout{}); a != nil {
		t.Error("CPU count changed but usage was reported")
	}
	if a, _, _ := cpuUsage(cur, cur, CPULayout{}); a != nil {
		t.Error("no time passed but usage was reported")
	}
}

func ptr(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestSystemSamplerRealMachine(t *testing.T) {
	s := NewSystemSampler("n1", slog.New(slog.DiscardHandler))
	defer s.Close()
	ctx := context.Background()
	first, err := s.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sys := first.(state.NodeSystemMeasured).System; sys.CPUUsage != nil {
		t.Errorf("first sample has CPU usage %v without a previous sample", *sys.CPUUsage)
	}
	// /proc/stat counts in 10 ms ticks: sample until ticks have passed
	// (busy and idle both count), so that a sample has a delta to divide.
	var sys state.NodeSystem
	testutil.WaitFor(t, "a sample with a CPU-time delta", func() bool {
		ev, err := s.Sample(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sys = ev.(state.NodeSystemMeasured).System
		return sys.CPUUsage != nil
	})
	if sys.CPUUsage == nil || *sys.CPUUsage < 0 || *sys.CPUUsage > 1 {
		t.Errorf("cpuUsage = %v, want 0..1", ptr(sys.CPUUsage))
	}
	if sys.Load1 == nil || *sys.Load1 < 0 {
		t.Errorf("load1 = %v", ptr(sys.Load1))
	}
	if runtime.GOOS == "linux" && sys.GPUUsage != nil {
		t.Errorf("Linux has no GPU reader, but gpuUsage = %v", *sys.GPUUsage)
	}
	if sys.Temp == nil && sys.TempSource != "" || sys.SysPower == nil && sys.PowerSource != "" {
		t.Errorf("a source is named for a null value: %+v", sys)
	}
}
