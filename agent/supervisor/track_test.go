package supervisor

import (
	"testing"
	"time"
)

// A shard transfer's samples become exact MB/s per interval, then 0.
func TestRateTrack(t *testing.T) {
	t0 := time.Unix(100, 0)
	got := rateTrack("A", "link C→A", []receivedAt{{t0, 0}, {t0.Add(100 * time.Millisecond), 1_000_000}, {t0.Add(300 * time.Millisecond), 1_500_000}})
	want := []float64{10, 2.5, 0}
	if len(got) != 3 {
		t.Fatalf("%+v", got)
	}
	for i, w := range want {
		if d := got[i].Value - w; d > 1e-9 || d < -1e-9 || got[i].Name != "link C→A" || got[i].Unit != "MB/s" || got[i].Node != "A" {
			t.Errorf("sample %d = %+v, want %v", i, got[i], w)
		}
	}
	if rateTrack("A", "", []receivedAt{{t0, 0}}) != nil {
		t.Error("a cut shard got a track")
	}
}
