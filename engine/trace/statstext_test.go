package trace

import (
	"errors"
	"strings"
	"testing"
)

func TestStatsWriteText(t *testing.T) {
	// Ranks 2 and 10 check the numeric order ("10" < "2" as strings).
	spans := goldenSpans()
	spans = append(spans,
		Span{Name: "x", Cat: "decode/compute", Rank: 10, StartNs: 2_000_000, DurNs: 7_000},
		Span{Name: "y", Cat: "decode/compute", Rank: 2, StartNs: 2_000_000, DurNs: 3_000})
	st := ComputeStats(spans)
	st.TaskID = "golden"
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	if want := "trace golden: wall time " + ms(float64(st.TotalWallTimeUs)) + " ms"; lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	// Categories are ordered by total, largest first: step (300 µs) before
	// decode/compute, and decode (220 µs) before prefill (50 µs).
	order := func(a, b string) {
		t.Helper()
		ia, ib := -1, -1
		for i, l := range lines {
			f := strings.Fields(l)
			if len(f) == 6 && f[0] == a && ia < 0 {
				ia = i
			}
			if len(f) == 6 && f[0] == b && ib < 0 {
				ib = i
			}
		}
		if ia < 0 || ib < 0 || ia > ib {
			t.Errorf("want category %s (line %d) before %s (line %d):\n%s", a, ia, b, ib, out)
		}
	}
	order("step", "decode/compute")
	order("decode", "prefill")
	// Ranks in numeric order in the per-rank table.
	var ranks []string
	inRanks := false
	for _, l := range lines {
		if l == "per rank:" {
			inRanks = true
			continue
		}
		if l == "" {
			inRanks = false
		}
		if f := strings.Fields(l); inRanks && len(f) == 7 && f[0] != "rank" && (len(ranks) == 0 || ranks[len(ranks)-1] != f[0]) {
			ranks = append(ranks, f[0])
		}
	}
	if got := strings.Join(ranks, ","); got != "0,1,2,10" {
		t.Errorf("per-rank order %s, want 0,1,2,10:\n%s", got, out)
	}
	// A row's figures: rank 10's one decode/compute span of 7 µs.
	if !containsFields(out, "10 decode/compute 0.007 1 0.007 0.007 0.007") {
		t.Errorf("no rank 10 row with 0.007 ms:\n%s", out)
	}

	if err := (Stats{}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "no spans\n") {
		t.Errorf("empty stats do not say \"no spans\":\n%s", b.String())
	}
	if err := st.WriteText(failWriter{}); !errors.Is(err, errFail) {
		t.Errorf("WriteText to a failing writer = %v, want its error", err)
	}
}

func containsFields(out, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(l), " ") == want {
			return true
		}
	}
	return false
}

var errFail = errors.New("disk full")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errFail }
