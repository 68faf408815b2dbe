package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/engine/model"
)

// tp-bench end to end on the small preset: real runners, a group of 2 and
// the single runner; pinned (where the machine has 2 cores), the twin
// beside it and the cores' ceiling. It checks that every figure the
// report is for came out, not how fast.
func TestTPBenchSmall(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "small.gguf")
	if err := model.Generate(path, model.Presets["small"]); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "tp-bench", "--model", path, "--tp", "2", "--dir", dir, "--repeat", "1",
		"--pp", "16", "--tg", "4", "--concurrent", "2", "--reduce-iters", "20", "--json").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("tp-bench: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var r bench.TPReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("tp-bench --json: %v\n%s", err, out)
	}
	for name, v := range map[string]float64{"prefill speed-up": r.PrefillX, "decode speed-up": r.DecodeX, "4-at-once speed-up": r.BatchedX,
		"group decode": r.Tensor.Decode, "all-reduce p50": r.AllReduce.P50Us} {
		if !(v > 0) {
			t.Errorf("%s: %v, want > 0", name, v)
		}
	}
	if len(r.DecodeRounds) != 1 || len(r.SliceBytes) != 2 {
		t.Errorf("decode rounds %v, slices %v: want 1 round, 2 slices", r.DecodeRounds, r.SliceBytes)
	}
	if runtime.NumCPU() < 2 {
		return // not pinned: no ceiling
	}
	if r.CeilingSkipped != "" { // 31 MB the twin needs
		t.Fatalf("pinned on %v, the ceiling was skipped: %s", r.Cores, r.CeilingSkipped)
	}
	if !(r.DecodeCeiling > 0 && r.PrefillCeiling > 0) || len(r.CeilingRounds) != 1 || !(r.Together.Decode > 0) {
		t.Errorf("pinned on %v: ceilings %v / %v by round %v, at once %v tok/s: want all measured", r.Cores,
			r.PrefillCeiling, r.DecodeCeiling, r.CeilingRounds, r.Together.Decode)
	}
}
