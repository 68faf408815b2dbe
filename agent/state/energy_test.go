package state

import (
	"math"
	"testing"
	"time"
)

func w(x float64) *float64 { return &x }

func TestEnergy(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := []PowerSample{{sec(0), w(10)}, {sec(1), w(20)}, {sec(2), w(20)}, {sec(3), w(40)}}
	for _, tc := range []struct {
		name   string
		a, b   float64
		want   float64
		wantOK bool
	}{
		{"whole", 0, 3, 15 + 20 + 30, true},
		{"inside one interval, interpolated ends", 0.5, 1, (15.0 + 20) / 2 * 0.5, true},
		{"past the last sample, held", 3, 4, 40, true},
		{"spanning samples", 0.5, 2.5, (15.0+20)/2*0.5 + 20 + (20.0+30)/2*0.5, true},
		{"before any sample, too early", -5, -4, 0, false},
		{"first reading just after the start", -0.5, 0.5, 10*0.5 + (10.0+15)/2*0.5, true},
		{"empty window", 1, 1, 0, false},
	} {
		got, ok := Energy(samples, sec(tc.a), sec(tc.b))
		if ok != tc.wantOK || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Energy = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
	// A reading without a value inside or around the window: unknown, not 0.
	gap := []PowerSample{{sec(0), w(10)}, {sec(1), nil}, {sec(2), w(10)}}
	if _, ok := Energy(gap, sec(0.5), sec(1.5)); ok {
		t.Error("energy across a sample without power is known")
	}
	if _, ok := Energy(gap, sec(2), sec(3)); !ok {
		t.Error("energy after the gap is unknown")
	}
	if _, ok := Energy(nil, sec(0), sec(1)); ok {
		t.Error("energy without samples is known")
	}
}

func TestSystemHistoryFromEvents(t *testing.T) {
	st := NewStore(NewLog(100), NewMemoryHistory(0))
	now := time.Now()
	for i, p := range []*float64{w(5), nil} {
		ev := NodeSystemMeasured{NodeID: "n1", System: NodeSystem{SysPower: p, SampledAt: now.Add(time.Duration(i) * time.Second)}}
		if err := st.Apply(Indexed{Idx: int64(i), Event: ev}); err != nil {
			t.Fatal(err)
		}
	}
	got := st.System().Power("n1")
	if len(got) != 2 || got[0].W == nil || *got[0].W != 5 || got[1].W != nil {
		t.Errorf("power history %+v", got)
	}
	if all, ok := st.System().Get("n1"); !ok || len(all) != 2 || all[1].SysPower != nil {
		t.Errorf("system history %+v, %v", all, ok)
	}
	if _, ok := st.System().Get("n2"); ok {
		t.Error("a node never sampled has a history")
	}
}

func TestNodesEnergy(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	power := map[string][]PowerSample{"a": {{T: t0, W: w(10)}}, "b": {{T: t0, W: w(5)}}, "c": {{T: t0, W: nil}}}
	get := func(n string) []PowerSample { return power[n] }
	// A node with two ranks counts once.
	if j, avg, ok := NodesEnergy([]string{"a", "b", "a"}, get, t0, t0.Add(2*time.Second)); !ok || j != 30 || avg != 15 {
		t.Errorf("NodesEnergy = %v J, %v W, %v; want 30 J, 15 W", j, avg, ok)
	}
	if _, _, ok := NodesEnergy([]string{"a", "c"}, get, t0, t0.Add(time.Second)); ok {
		t.Error("energy known with a node of unknown power")
	}
	if _, _, ok := NodesEnergy(nil, get, t0, t0.Add(time.Second)); ok {
		t.Error("energy of no nodes is known")
	}
}
