package bench

import (
	"strings"
	"testing"
)

// The ceiling's lines: what the runners at once reached, the ceilings
// (Ranks × at once / alone), and the group's share of them.
func TestPrintTPCeiling(t *testing.T) {
	r := &TPReport{Model: "m.gguf", Ranks: 2, Wire: "f32", Cores: []int{0, 1}, Config: "llama",
		Single:   TPSide{Prefill: 50, Decode: 10},
		Tensor:   TPSide{Prefill: 80, Decode: 12},
		Together: TPSide{Prefill: 40, Decode: 8},
		PrefillX: 1.6, DecodeX: 1.2, PrefillCeiling: 1.6, DecodeCeiling: 1.6, CeilingRounds: []float64{1.5, 1.7}}
	var b strings.Builder
	PrintTP(&b, r)
	out := b.String()
	for _, want := range []string{
		"2 runners of the whole model at once, one a core (the slowest): prefill 40.0 tok/s, decode 8.0 tok/s",
		"prefill 1.60x, decode 1.60x (by round 1.50x 1.70x)",
		"the group reaches          prefill 100 %, decode 75 % of it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	// Unpinned (no ceiling measured): no ceiling lines.
	r.DecodeCeiling, r.Cores = 0, nil
	b.Reset()
	PrintTP(&b, r)
	if strings.Contains(b.String(), "ceiling") {
		t.Errorf("a ceiling printed without one measured:\n%s", b.String())
	}
	// Skipped for memory: says why.
	r.CeilingSkipped = "the cores' ceiling needs a runner of the whole model on each of 1 more cores (2 GiB in all), and 1 GiB is available"
	b.Reset()
	PrintTP(&b, r)
	if !strings.Contains(b.String(), "not measured: "+r.CeilingSkipped) {
		t.Errorf("no reason for the ceiling skipped:\n%s", b.String())
	}
}

// The ceilings: Ranks × the runners at once over one alone, by round and
// of the means.
func TestTPCeilings(t *testing.T) {
	r := &TPReport{Ranks: 2,
		Single:   TPSide{DecodeTokPerSec: []float64{10, 20}, Decode: 15, Prefill: 50},
		Together: TPSide{DecodeTokPerSec: []float64{8, 12}, Decode: 10, Prefill: 45}}
	r.ceilings()
	if len(r.CeilingRounds) != 2 || r.CeilingRounds[0] != 1.6 || r.CeilingRounds[1] != 1.2 {
		t.Errorf("by round %v, want [1.6 1.2]", r.CeilingRounds)
	}
	if want := 2 * 10 / 15.0; r.DecodeCeiling != want {
		t.Errorf("decode ceiling %v, want %v", r.DecodeCeiling, want)
	}
	if r.PrefillCeiling != 1.8 {
		t.Errorf("prefill ceiling %v, want 1.8", r.PrefillCeiling)
	}
}
