package telemetry

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/shirou/gopsutil/v4/mem"

	"github.com/orrery-cluster/orrery/agent/state"
)

// MemorySampler reads RAM and swap. It is the fast path (every 0.5 s), so it
// makes as few OS calls as the platform allows: on Linux one read of
// /proc/meminfo gives both RAM and swap.
type MemorySampler struct {
	NodeID string
	Now    func() time.Time // nil: time.Now
	// Limit, when not 0, caps the RAM reported, total and available.
	Limit uint64
}

func (*MemorySampler) Name() string { return "memory" }

// Read takes one memory reading.
func (m *MemorySampler) Read(ctx context.Context) (state.NodeMemory, error) {
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return state.NodeMemory{}, fmt.Errorf("virtual memory: %w", err)
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	total, avail := vm.Total, vm.Available
	if m.Limit > 0 {
		total, avail = min(total, m.Limit), min(avail, m.Limit)
	}
	out := state.NodeMemory{
		RAMTotal:     state.Bytes(total),
		RAMAvailable: state.Bytes(avail),
		SampledAt:    now().UTC(),
	}
	if runtime.GOOS == "linux" {
		out.SwapTotal, out.SwapAvailable = state.Bytes(vm.SwapTotal), state.Bytes(vm.SwapFree)
		return out, nil
	}
	sw, err := mem.SwapMemoryWithContext(ctx)
	if err != nil {
		// RAM is still worth publishing; swap stays null.
		return out, nil
	}
	out.SwapTotal, out.SwapAvailable = state.Bytes(sw.Total), state.Bytes(sw.Free)
	return out, nil
}

func (m *MemorySampler) Sample(ctx context.Context) (state.Event, error) {
	r, err := m.Read(ctx)
	if err != nil {
		return nil, err
	}
	return state.NodeMemoryMeasured{NodeID: m.NodeID, Memory: r}, nil
}
