package bench

import (
	"strings"
	"testing"
)

// The bandwidth lines give the bytes one token reads, their share of the
// weights for a mixture of experts, and decode against the bound they set.
func TestPrintEngineActiveBytes(t *testing.T) {
	rep := &EngineReport{ReadBandwidthGBps: 50, Threads: 2, WeightBytes: 2e9, ActiveBytes: 5e8,
		Rows: []EngineRow{{Test: "pp128", Mean: 100}, {Test: "tg32", Mean: 40}, {Test: "tg32", Traced: true, Mean: 39}}}
	rep.DecodeBoundTokPerSec = rep.ReadBandwidthGBps * 1e9 / float64(rep.ActiveBytes)
	var b strings.Builder
	PrintEngine(&b, rep)
	out := b.String()
	for _, want := range []string{
		"decode bound 100.0 tok/s for 476.8 MiB read per token (0.500 GB/token, 25 % of the 1.9 GiB of weights)",
		"decode 40.00 tok/s = 40 % of the bound, 20.0 GB/s of active weights",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// A dense model: no share, since it reads (nearly) all its weights.
	rep.ActiveBytes = 19e8
	b.Reset()
	PrintEngine(&b, rep)
	if strings.Contains(b.String(), "% of the") && strings.Contains(b.String(), "of weights)") {
		t.Errorf("dense model shows an active share:\n%s", b.String())
	}
}
