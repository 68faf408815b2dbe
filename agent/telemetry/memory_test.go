package telemetry

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

func TestMemorySamplerRealMachine(t *testing.T) {
	m := &MemorySampler{NodeID: "n1"}
	ev, err := m.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mm, ok := ev.(state.NodeMemoryMeasured)
	if !ok || mm.NodeID != "n1" {
		t.Fatalf("event = %#v", ev)
	}
	r := mm.Memory
	if r.RAMTotal == nil || r.RAMAvailable == nil {
		t.Fatalf("RAM unknown on this machine: %+v", r)
	}
	if !(0 < r.RAMAvailable.InBytes && r.RAMAvailable.InBytes <= r.RAMTotal.InBytes) {
		t.Errorf("want 0 < ramAvailable (%d) ≤ ramTotal (%d)", r.RAMAvailable.InBytes, r.RAMTotal.InBytes)
	}
	if r.SwapTotal == nil || r.SwapAvailable == nil || r.SwapAvailable.InBytes > r.SwapTotal.InBytes {
		t.Errorf("swap = %+v / %+v", r.SwapAvailable, r.SwapTotal)
	}
	if time.Since(r.SampledAt) > time.Minute || r.SampledAt.Location() != time.UTC {
		t.Errorf("sampledAt = %v", r.SampledAt)
	}
}

// A limit caps what the node reports, total and available, as a smaller
// machine would report them.
func TestMemorySamplerLimit(t *testing.T) {
	r, err := (&MemorySampler{NodeID: "n1", Limit: 64 << 20}).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.RAMTotal == nil || r.RAMAvailable == nil || r.RAMTotal.InBytes != 64<<20 || r.RAMAvailable.InBytes > 64<<20 || r.RAMAvailable.InBytes == 0 {
		t.Fatalf("with a 64 MiB limit: %+v / %+v", r.RAMAvailable, r.RAMTotal)
	}
}

// BenchmarkMemorySample measures one memory sample and reports its p99 (the
// goal is ≤ 1 ms at p99) besides the mean.
func BenchmarkMemorySample(b *testing.B) {
	m := &MemorySampler{NodeID: "n1"}
	ctx := context.Background()
	durs := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		t := time.Now()
		if _, err := m.Sample(ctx); err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(t))
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	if len(durs) > 0 {
		b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(durs[len(durs)-1].Nanoseconds()), "max-ns")
	}
}
