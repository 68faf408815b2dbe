package trace

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// cs builds CategoryStats; avg is total/count.
func cs(total, count, minUs, maxUs int64) CategoryStats {
	return CategoryStats{TotalUs: total, Count: count, MinUs: minUs, MaxUs: maxUs, AvgUs: float64(total) / float64(count)}
}

// goldenSpans is a small two-rank trace whose statistics are worked out by
// hand below. Times are in ns; the comments give them truncated to µs, as the
// statistics see them.
func goldenSpans() []Span {
	us := func(v int64) int64 { return v * 1000 }
	return []Span{
		// rank 0: two decode steps, each with a compute and a comms child.
		{Name: "decode 0", Cat: "decode", Rank: 0, StartNs: us(1000), DurNs: us(100)},                // A 1000 +100
		{Name: "joint", Cat: "decode/compute", Rank: 0, StartNs: us(1010), DurNs: us(60) + 999},      // B 1010 +60
		{Name: "send 1", Cat: "decode/comms", Rank: 0, StartNs: us(1075), DurNs: us(20)},             // C 1075 +20
		{Name: "decode 1", Cat: "decode", Rank: 0, StartNs: us(1200), DurNs: us(120)},                // D 1200 +120
		{Name: "joint", Cat: "decode/compute", Rank: 0, StartNs: us(1205), DurNs: us(80)},            // E 1205 +80
		{Name: "send 1", Cat: "decode/comms", Rank: 0, StartNs: us(1290) + 500, DurNs: us(25) + 400}, // F 1290 +25
		// rank 1: a prefill with nested comms, a step, and a stray compute.
		{Name: "prefill", Cat: "prefill", Rank: 1, StartNs: us(900), DurNs: us(50)},                // G 900 +50
		{Name: "recv 0", Cat: "prefill/comms", Rank: 1, StartNs: us(905), DurNs: us(30)},           // H 905 +30
		{Name: "recv 0 wait", Cat: "prefill/comms/recv", Rank: 1, StartNs: us(906), DurNs: us(10)}, // I 906 +10
		{Name: "step 0", Cat: "step", Rank: 1, StartNs: us(1100), DurNs: us(300)},                  // J 1100 +300
		{Name: "mlp", Cat: "step/compute", Rank: 1, StartNs: us(1110), DurNs: us(200) + 500},       // K 1110 +200
		{Name: "joint", Cat: "decode/compute", Rank: 1, StartNs: us(1500), DurNs: us(40)},          // L 1500 +40
	}
}

func TestComputeStatsGolden(t *testing.T) {
	got := ComputeStats(goldenSpans())
	want := Stats{
		// Earliest start: G at 900. Latest end: L at 1500+40 = 1540
		// (A ends 1100, D 1320, J 1400, K 1310). 1540 − 900 = 640.
		TotalWallTimeUs: 640,
		ByCategory: map[string]CategoryStats{
			"decode":             cs(220, 2, 100, 120), // A 100 + D 120
			"decode/compute":     cs(180, 3, 40, 80),   // B 60 + E 80 + L 40 → avg 60
			"decode/comms":       cs(45, 2, 20, 25),    // C 20 + F 25 → avg 22.5
			"prefill":            cs(50, 1, 50, 50),    // G
			"prefill/comms":      cs(30, 1, 30, 30),    // H
			"prefill/comms/recv": cs(10, 1, 10, 10),    // I
			"step":               cs(300, 1, 300, 300), // J
			"step/compute":       cs(200, 1, 200, 200), // K (200.5 µs truncated)
		},
		ByRank: map[string]RankStats{
			"0": {ByCategory: map[string]CategoryStats{
				"decode":         cs(220, 2, 100, 120),
				"decode/compute": cs(140, 2, 60, 80), // B + E → avg 70
				"decode/comms":   cs(45, 2, 20, 25),
			}},
			"1": {ByCategory: map[string]CategoryStats{
				"prefill":            cs(50, 1, 50, 50),
				"prefill/comms":      cs(30, 1, 30, 30),
				"prefill/comms/recv": cs(10, 1, 10, 10),
				"step":               cs(300, 1, 300, 300),
				"step/compute":       cs(200, 1, 200, 200),
				"decode/compute":     cs(40, 1, 40, 40), // L
			}},
		},
		Phases: map[string]PhaseStats{
			// Wall: A and D do not overlap, 100 + 120.
			"decode": {CategoryStats: cs(220, 2, 100, 120), WallUs: 220, Sub: map[string]CategoryStats{
				"compute": cs(180, 3, 40, 80),
				"comms":   cs(45, 2, 20, 25),
			}},
			"prefill": {CategoryStats: cs(50, 1, 50, 50), WallUs: 50, Sub: map[string]CategoryStats{
				"comms":      cs(30, 1, 30, 30),
				"comms/recv": cs(10, 1, 10, 10),
			}},
			"step": {CategoryStats: cs(300, 1, 300, 300), WallUs: 300, Sub: map[string]CategoryStats{
				"compute": cs(200, 1, 200, 200),
			}},
		},
		PerStep: map[string]StepStats{
			// 2 decode steps: compute 180/2 = 90, comms 45/2 = 22.5 per step.
			"decode": {CategoryStats: cs(220, 2, 100, 120), PerStepUs: map[string]float64{"compute": 90, "comms": 22.5}},
			// 1 prefill: comms 30, comms/recv 10.
			"prefill": {CategoryStats: cs(50, 1, 50, 50), PerStepUs: map[string]float64{"comms": 30, "comms/recv": 10}},
			// 1 step: compute 200.
			"step": {CategoryStats: cs(300, 1, 300, 300), PerStepUs: map[string]float64{"compute": 200}},
		},
		ByRankShare: map[string]ShareStats{
			// rank 0: compute B+E = 140, comms C+F = 45; 140/185 and 45/185.
			"0": {ComputeUs: 140, CommsUs: 45, ComputeShare: 140.0 / 185, CommsShare: 45.0 / 185},
			// rank 1: compute K+L = 240; comms H = 30 (I is inside a comms
			// span, so not counted again); 240/270 and 30/270.
			"1": {ComputeUs: 240, CommsUs: 30, ComputeShare: 240.0 / 270, CommsShare: 30.0 / 270},
		},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("stats differ\n got %s\nwant %s", g, w)
	}
}

func TestStatsJSONShape(t *testing.T) {
	tr := &Trace{TaskID: "t-1", Spans: goldenSpans()[:3]}
	b, err := json.Marshal(tr.Stats())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"taskId", "totalWallTimeUs", "byCategory", "byRank", "phases", "perStep", "byRankShare"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	var byRank map[string]struct {
		ByCategory map[string]map[string]float64 `json:"byCategory"`
	}
	if err := json.Unmarshal(doc["byRank"], &byRank); err != nil {
		t.Fatal(err)
	}
	c := byRank["0"].ByCategory["decode/compute"]
	for _, k := range []string{"totalUs", "count", "minUs", "maxUs", "avgUs"} {
		if _, ok := c[k]; !ok {
			t.Errorf("byRank[0].byCategory[decode/compute] lacks %q: %v", k, c)
		}
	}
	// Without a task id the field is left out, and empty stats are objects.
	b, _ = json.Marshal(ComputeStats(nil))
	if want := `{"totalWallTimeUs":0,"byCategory":{},"byRank":{},"phases":{},"perStep":{},"byRankShare":{}}`; string(b) != want {
		t.Errorf("empty stats = %s, want %s", b, want)
	}
}

func TestStatsEdgeCases(t *testing.T) {
	spans := []Span{
		{Cat: "", Rank: -3, StartNs: -5000, DurNs: 2000},        // negative rank and time
		{Cat: "a/step", Rank: 5000, StartNs: 1000, DurNs: 1000}, // sparse rank, nested step
		{Cat: "a/step/x", Rank: 5000, StartNs: 1000, DurNs: 500},
		{Cat: "comms/compute", Rank: 5000, StartNs: 0, DurNs: -7000}, // compute inside comms: neither
	}
	st := ComputeStats(spans)
	// Starts −5, 1, 1, 0 µs; ends −3, 2, 1, −7: wall 2 − (−5) = 7.
	if st.TotalWallTimeUs != 7 {
		t.Errorf("wall %d, want 7", st.TotalWallTimeUs)
	}
	if st.ByRank["-3"].ByCategory[""].TotalUs != 2 || st.ByRank["5000"].ByCategory["comms/compute"].MinUs != -7 {
		t.Errorf("byRank %+v", st.ByRank)
	}
	if s := st.PerStep["a/step"]; s.Count != 1 || s.PerStepUs["x"] != 0 {
		t.Errorf("perStep %+v", st.PerStep)
	}
	if sh := st.ByRankShare["5000"]; sh != (ShareStats{}) {
		t.Errorf("share %+v, want zero", sh)
	}
	if p := st.Phases["a"]; p.Count != 0 || p.Sub["step"].Count != 1 || p.Sub["step/x"].Count != 1 {
		t.Errorf("phases %+v", st.Phases)
	}
	if math.IsNaN(st.ByRankShare["-3"].ComputeShare) {
		t.Error("share is NaN")
	}
}

// A phase's wall time counts overlapping spans (of several ranks) once;
// its total sums them.
func TestPhaseWallTime(t *testing.T) {
	us := int64(1000)
	st := ComputeStats([]Span{
		{Cat: "decode", Rank: 0, StartNs: 0, DurNs: 100 * us},
		{Cat: "decode", Rank: 1, StartNs: 50 * us, DurNs: 100 * us},
		{Cat: "decode/compute", Rank: 1, StartNs: 60 * us, DurNs: 500 * us},
		{Cat: "decode", Rank: 2, StartNs: 200 * us, DurNs: 50 * us},
		{Cat: "prefill", Rank: 0, StartNs: 300 * us, DurNs: 10 * us},
	})
	if p := st.Phases["decode"]; p.WallUs != 200 || p.TotalUs != 250 {
		t.Errorf("decode: wall %d µs, total %d µs; want 200 and 250", p.WallUs, p.TotalUs)
	}
	if p := st.Phases["prefill"]; p.WallUs != 10 {
		t.Errorf("prefill: wall %d µs", p.WallUs)
	}
}
