package supervisor

import (
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// A shard transfer's samples become exact MB/s per interval, then 0.
func TestRateTrack(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(d time.Duration, done float64) trace.CounterSample {
		return trace.CounterSample{TsNs: t0.Add(d).UnixNano(), Value: done}
	}
	got := rateTrack("A", "link C→A", []trace.CounterSample{at(0, 0), at(100*time.Millisecond, 1_000_000), at(300*time.Millisecond, 1_500_000)})
	want := []float64{10, 2.5, 0}
	if len(got) != 3 {
		t.Fatalf("%+v", got)
	}
	for i, w := range want {
		if d := got[i].Value - w; d > 1e-9 || d < -1e-9 || got[i].Name != "link C→A" || got[i].Unit != "MB/s" || got[i].Node != "A" {
			t.Errorf("sample %d = %+v, want %v", i, got[i], w)
		}
	}
	if rateTrack("A", "", []trace.CounterSample{at(0, 0)}) != nil {
		t.Error("a cut shard got a track")
	}
}
