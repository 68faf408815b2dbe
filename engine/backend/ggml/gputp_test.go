package ggml

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/split"
)

// needGPU skips a test that computes on a GPU where make gpu's backends
// are not named by ORRERY_GPU_LIB, failing instead under
// ORRERY_GPU_REQUIRED=1 (CI).
func needGPU(t *testing.T) {
	t.Helper()
	if os.Getenv(gpuLibEnv) != "" {
		return
	}
	if os.Getenv("ORRERY_GPU_REQUIRED") == "1" {
		t.Fatalf("ORRERY_GPU_REQUIRED=1 but %s is not set: make gpu builds ggml's GPU backends", gpuLibEnv)
	}
	t.Skipf("%s is not set: make gpu builds ggml's GPU backends", gpuLibEnv)
}

// A tensor-parallel group of two ranks with every block on a GPU
// (lavapipe here): each all-reduce crosses from the device to the host and
// back (allreduce.go's copying op, where the in-place one faulted on the
// device's address). Its logits are the whole model's on the CPU, within
// the conformance bounds of the weights' type (docs/conformance.md: 0.02
// of a std for F32, 0.3 for 8-bit quants): the GPU multiplies a batch
// with its activations in F16 where the CPU keeps F32, and in F32 where
// the CPU quantizes them to Q8_0. A mixture of experts split by experts
// (each expert-parallel rank's custom ops on the host) may flip an
// expert's choice at a near-tie (the conformance rows' 0.75). And a group
// of one GPU rank and one CPU rank. Each rank is a process of its own.
func TestGPUTensorParallelMatchesOneRank(t *testing.T) {
	needGPU(t)
	prompt := []int32{1, 300, 301, 302, 17, 250, 99, 7}
	for _, c := range []struct {
		name, family, typ string
		bound             float64
		gpu               []bool // each rank's blocks on the GPU
	}{
		{"F32", "llama", "F32", 0.02, []bool{true, true}},
		{"Q8_0", "llama", "Q8_0", 0.3, []bool{true, true}},
		{"experts", "qwen3moe", "F32", 0.75, []bool{true, true}},
		{"GPU and CPU", "llama", "F32", 0.02, []bool{true, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), c.family+"-"+c.typ+".gguf")
			shape := tpShape(c.family, c.typ, 128, 4, 2)
			if err := model.Generate(path, shape); err != nil {
				t.Fatal(err)
			}
			want := tpLogits(t, path, nil, prompt)
			f, cfg := modeltest.Read(t, path)
			plan, err := split.PlanTP(f, cfg, 2)
			if err != nil {
				t.Fatal(err)
			}
			jobs := make([]tpJob, len(plan))
			for r, s := range plan {
				p := filepath.Join(t.TempDir(), fmt.Sprintf("tp%d.gguf", r))
				if err := split.WriteTPSlice(path, p, 0, shape.Layers, s, "test"); err != nil {
					t.Fatal(err)
				}
				jobs[r] = tpJob{Slice: p, Prompt: prompt, Wire: collective.WireF32, GPU: c.gpu[r]}
			}
			res := tpRanks.Run(t, jobs)
			var got [][]float32
			if err := json.Unmarshal(res[0], &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d steps of logits, want %d", len(got), len(want))
			}
			worst := 0.0
			for step := range want {
				worst = max(worst, maxDiffOverStd(got[step], want[step]))
			}
			t.Logf("%s %s, ranks on the GPU %v against one on the CPU: max |Δ|/std %.2g over %d steps", c.family, c.typ, c.gpu, worst, len(want))
			if !(worst <= c.bound) {
				t.Errorf("max |Δ|/std %.3g, want ≤ %g", worst, c.bound)
			}
		})
	}
}
