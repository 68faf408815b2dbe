package bench

import (
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/cluster/ringbench"
)

func TestPrintRing(t *testing.T) {
	res := api.RingBenchResult{Result: ringbench.Result{Order: []string{"aaaaaaaaaa", "bbbbbbbbbb"}, Size: 1024, Rounds: 2,
		RoundMs: []float64{1, 3}, Hops: []ringbench.HopStat{{From: "aaaaaaaaaa", To: "bbbbbbbbbb", LatencyMsAvg: 0.5, ThroughputMBps: 2}}},
		TraceID: "ring-1", TraceSaved: true}
	var b strings.Builder
	PrintRing(&b, res, "http://h:1")
	for _, w := range []string{"ring of 2 nodes, 1024 bytes, 2 rounds", "aaaaaaaa  bbbbbbbb", "full round: 2.00 ms on average",
		"trace: ring-1 (orrery trace stats ring-1 --api http://h:1)"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, b.String())
		}
	}
	if Median([]float64{3, 1, 2, 10}) != 2.5 || Mean(nil) != 0 || HumanBytes(1536) != "1.5 KiB" {
		t.Error("Median, Mean or HumanBytes")
	}
}
