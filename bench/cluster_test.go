package bench

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/placement"
)

func TestBenchParsing(t *testing.T) {
	if got, err := ParseIntList("pp", "128, 512"); err != nil || !reflect.DeepEqual(got, []int{128, 512}) {
		t.Errorf("ParseIntList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "12,x", "-3"} {
		if _, err := ParseIntList("pp", bad); err == nil {
			t.Errorf("ParseIntList(%q) took it", bad)
		}
	}
	ps, err := ParsePlacements("1,3,ab12+cd34")
	if err != nil || len(ps) != 3 || ps[0].Count != 1 || ps[1].Count != 3 || !reflect.DeepEqual(ps[2].Nodes, []string{"ab12", "cd34"}) {
		t.Errorf("ParsePlacements = %+v, %v", ps, err)
	}
	ps, err = ParsePlacements("tensor:2,auto:ab12+cd34,pipeline:2")
	if err != nil || len(ps) != 3 || ps[0].Count != 2 || ps[0].Parallelism != "tensor" || ps[1].Parallelism != "auto" ||
		!reflect.DeepEqual(ps[1].Nodes, []string{"ab12", "cd34"}) || ps[2].Parallelism != "" || ps[0].String() != "tensor:2 node(s)" {
		t.Errorf("ParsePlacements with plans = %+v, %v", ps, err)
	}
	if _, err := ParsePlacements("tensor:1"); err == nil {
		t.Error("a tensor group of 1 taken")
	}
	if _, err := ParsePlacements("0"); err == nil {
		t.Error("placement on 0 nodes taken")
	}
	if _, err := ParsePlacements("a++b"); err == nil {
		t.Error("empty node id taken")
	}
	if got := Shapes([]int{1, 2}, []int{3, 4}, false); !reflect.DeepEqual(got, [][2]int{{1, 3}, {2, 4}}) {
		t.Errorf("paired shapes %v", got)
	}
	if got := Shapes([]int{1, 2}, []int{3, 4}, true); len(got) != 4 {
		t.Errorf("cartesian shapes %v", got)
	}
	if got := Shapes([]int{1, 2, 5}, []int{3}, false); len(got) != 3 {
		t.Errorf("unequal lists: %v, want the product", got)
	}
}

func TestResolvePlacements(t *testing.T) {
	pv := api.PreviewsResponse{Previews: []placement.Preview{
		{Nodes: 1, Fits: true, Ranks: []placement.Rank{{NodeID: "aaaa-1"}}},
		{Nodes: 2, Fits: false, Error: "rank 1 on bbbb-2 short by 3.0 GiB"},
	}}
	st := state.New()
	st.NodeIdentities = map[string]state.NodeIdentity{"aaaa-1": {}, "bbbb-2": {}, "bbbb-3": {}}
	if got, err := resolvePlacements(nil, pv, st); err != nil || !reflect.DeepEqual(got, [][]string{{"aaaa-1"}}) {
		t.Errorf("default placements = %v, %v (want every count that fits)", got, err)
	}
	if _, err := resolvePlacements([]Placement{{Count: 2}}, pv, st); err == nil || err.Error() != "placement on 2 node(s): rank 1 on bbbb-2 short by 3.0 GiB" {
		t.Errorf("a placement that does not fit: %v", err)
	}
	if got, err := resolvePlacements([]Placement{{Nodes: []string{"aa", "bbbb-3"}}}, pv, st); err != nil || !reflect.DeepEqual(got, [][]string{{"aaaa-1", "bbbb-3"}}) {
		t.Errorf("explicit = %v, %v", got, err)
	}
	if _, err := resolvePlacements([]Placement{{Nodes: []string{"bbbb"}}}, pv, st); err == nil {
		t.Error("an ambiguous prefix was taken")
	}
}

func TestBenchSampler(t *testing.T) {
	s := newSampler(nil, time.Second, true)
	t0 := time.Now()
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	w := func(x float64) *float64 { return &x }
	s.mem["a"] = []memPoint{{at(0), 100}, {at(1), 500}, {at(2), 300}, {at(5), 900}}
	s.power["a"] = []state.PowerSample{{T: at(0), W: w(10)}, {T: at(2), W: w(10)}}
	s.power["b"] = []state.PowerSample{{T: at(0), W: nil}}
	// [1.5, 1.8]: no sample inside; bracketed by 500 before and 300 after.
	if got := s.peakMemory([]string{"a", "b"}, at(1.5), at(1.8)); len(got) != 1 || got["a"].InBytes != 500 {
		t.Errorf("peak memory %v", got)
	}
	if j, avg := s.energy([]string{"a"}, at(0.5), at(1.5)); j == nil || *j != 10 || *avg != 10 {
		t.Errorf("energy %v %v, want 10 J at 10 W", j, avg)
	}
	if j, avg := s.energy([]string{"a", "b"}, at(0.5), at(1.5)); j != nil || avg != nil {
		t.Error("energy with a node of unknown power is not null")
	}
	res := []result{
		{PromptTokens: 10, GenTokens: 4, PrefillTPS: 100, DecodeTPS: 20, TTFT: 50 * time.Millisecond, TraceID: "chat-1"},
		{PromptTokens: 10, GenTokens: 4, PrefillTPS: 300, DecodeTPS: 40, TTFT: 150 * time.Millisecond, TraceID: "chat-2"},
		{Err: errors.New("boom"), TraceID: "chat-3"},
	}
	run := summarize(res, at(0), at(2))
	if run.PromptTPS != 200 || run.GenTPS != 30 || run.TTFTMs != 100 || run.GenTokens != 4 || run.GenThroughputTPS != 4 ||
		len(run.TraceIDs) != 3 || run.TraceID != "chat-1" || len(run.Errors) != 1 {
		t.Errorf("summarizeBatch = %+v", run)
	}
}
