package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The GPU tests: every path with blocks on a GPU, through real runners
// and agents, on Vulkan (Mesa's lavapipe where there is no GPU, as here).
// They run when $ORRERY_GPU_LIB names the directory of ggml's GPU backends
// (make gpu builds them into lib/ollama); unset, they skip, unless
// $ORRERY_GPU_REQUIRED is 1 (CI), where they fail. Each runner process
// loads one model (and a draft beside it): lavapipe has corrupted its heap
// when one process loaded GPU models one after another.

const (
	gpuLibEnv      = "ORRERY_GPU_LIB"
	gpuRequiredEnv = "ORRERY_GPU_REQUIRED"
)

// needGPU skips a GPU test under -short, and where no GPU backends were
// built (failing instead where they must be), and points this process's
// children at the backends and at Mesa's shader cache kept across runs
// (lavapipe compiles each pipeline on first use; agents here run with
// their own HOME, which would start the cache afresh).
func needGPU(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow end-to-end on a GPU (lavapipe): runs in make test")
	}
	dir := os.Getenv(gpuLibEnv)
	if dir == "" {
		if os.Getenv(gpuRequiredEnv) == "1" {
			t.Fatalf("%s=1 but %s is not set: make gpu builds ggml's GPU backends into lib/ollama", gpuRequiredEnv, gpuLibEnv)
		}
		t.Skipf("%s is not set: make gpu builds ggml's GPU backends, and make gpu-test runs the GPU tests with them", gpuLibEnv)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "libggml-vulkan.so")); err != nil {
		t.Fatalf("%s=%s: no Vulkan backend there (make gpu): %v", gpuLibEnv, dir, err)
	}
	t.Setenv(gpuLibEnv, abs)
	if os.Getenv("MESA_SHADER_CACHE_DIR") == "" {
		if c, err := os.UserCacheDir(); err == nil {
			t.Setenv("MESA_SHADER_CACHE_DIR", filepath.Join(c, "orrery", "gpu", "mesa-shader-cache"))
		}
	}
}

// logitsF32Bound bounds max |Δ|/std of an F32 model's logits on the GPU
// against the CPU's (the conformance tests' F32 bound): lavapipe and the
// CPU compute in F32, summing in other orders. Measured: 1.6e-6 with
// every block on the GPU, 1.0e-6 with half.
const logitsF32Bound = 1e-4

// `orrery logits` on the tiny model (F32) with every block and the head on
// the GPU, with half the blocks, and with auto but no software device
// allowed: the greedy tokens of the CPU's run, logits within the F32
// bound, and the JSON saying where the blocks went. This is what the
// Metal smoke test runs on a Mac.
func TestGPULogitsCommand(t *testing.T) {
	needGPU(t)
	bin := buildBinary(t)
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := model.Generate(path, model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	layers := model.Presets["tiny"].Layers
	logits := func(args ...string) logitsReport {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"logits", "--model", path, "--prompt-ids", "1,300,301,302,17,250,99,7", "--gen", "16", "--kv-type", "f32"}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var rep logitsReport
		if err != nil || json.Unmarshal(out, &rep) != nil {
			t.Fatalf("orrery logits %v: %v\n%s", args, err, stderr.String())
		}
		return rep
	}
	cpu := logits()
	if cpu.Offload.Device != nil || cpu.Offload.Blocks != 0 {
		t.Fatalf("the CPU run: offload %+v", cpu.Offload)
	}
	for _, c := range []struct {
		name   string
		args   []string
		blocks int
		head   bool
	}{
		{"every block and the head", []string{"--gpu-layers", "999", "--gpu-software"}, layers, true},
		{"half the blocks", []string{"--gpu-layers", fmt.Sprint(layers / 2), "--gpu-software"}, layers / 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := logits(c.args...)
			o := got.Offload
			if o.Device == nil || o.Device.Library != "Vulkan" || o.Blocks != c.blocks || o.Total != layers || o.Head != c.head || o.GPUBytes == 0 {
				t.Fatalf("offload %+v (device %+v), want %d/%d blocks (head %v) on a Vulkan device", o, o.Device, c.blocks, layers, c.head)
			}
			if !slices.Equal(got.Tokens, cpu.Tokens) {
				t.Errorf("greedy tokens %v on the GPU, %v on the CPU", got.Tokens, cpu.Tokens)
			}
			worst := 0.0
			for i := range cpu.Logits {
				worst = max(worst, maxDiffOverStd(got.Logits[i], cpu.Logits[i]))
			}
			t.Logf("%s: %s; max |Δ|/std of the logits over %d steps: %.2g", c.name, o, len(cpu.Logits), worst)
			if !(worst <= logitsF32Bound) {
				t.Errorf("max |Δ|/std %.3g, want ≤ %g", worst, logitsF32Bound)
			}
		})
	}
	// auto never takes a software device unasked (ggml does not even list
	// lavapipe without GGML_VK_VISIBLE_DEVICES): the CPU, saying why.
	auto := logits("--gpu-layers", "auto")
	if auto.Offload.Device != nil || !strings.HasPrefix(auto.Offload.Reason, "no GPU") || !slices.Equal(auto.Tokens, cpu.Tokens) {
		t.Errorf("auto without --gpu-software: offload %+v, tokens %v; want the CPU's %v, for want of a GPU", auto.Offload, auto.Tokens, cpu.Tokens)
	}
}

// maxDiffOverStd is max |a−b| over the standard deviation of b.
func maxDiffOverStd(a, b []float32) float64 {
	if len(a) != len(b) || len(b) == 0 {
		return math.Inf(1)
	}
	var mean, ss, worst float64
	for _, v := range b {
		mean += float64(v)
	}
	mean /= float64(len(b))
	for i, v := range b {
		ss += (float64(v) - mean) * (float64(v) - mean)
		worst = max(worst, math.Abs(float64(a[i])-float64(v)))
	}
	return worst / math.Sqrt(ss/float64(len(b)))
}

// wantOffload waits until rank's runner of instance in (on p's state) is
// Ready with its offload published, and checks it: its blocks all on a
// Vulkan device (gpu), or none (the CPU, with reason in its Reason).
func wantOffload(t *testing.T, p *agentProc, instance string, rank int, gpu bool, reason string) runnerapi.Offload {
	t.Helper()
	id := fmt.Sprintf("%s-%d", instance, rank)
	var o *runnerapi.Offload
	poll(t, p, 90*time.Second, "runner "+id+" ready with its offload", func() (bool, string) {
		var r struct {
			Status  string
			Offload *runnerapi.Offload
		}
		code, b, err := p.get("/state/runners/" + id)
		if err != nil || code != 200 || json.Unmarshal(b, &r) != nil {
			return false, fmt.Sprintf("%d %s %v", code, b, err)
		}
		o = r.Offload
		return (r.Status == "Ready" || r.Status == "Running") && o != nil, string(b)
	})
	switch {
	case gpu && (o.Device == nil || o.Device.Library != "Vulkan" || o.Blocks != o.Total || o.Total == 0):
		t.Fatalf("rank %d: offload %+v, want every block on a Vulkan device", rank, *o)
	case !gpu && (o.Device != nil || o.Blocks != 0 || !strings.Contains(o.Reason, reason)):
		t.Fatalf("rank %d: offload %+v, want the CPU (%s)", rank, *o, reason)
	}
	t.Logf("rank %d of %s: %s %s", rank, instance, o, o.Reason)
	return *o
}

// --gpu-memory caps the GPU memory a rank takes: with a cap of the offload
// margin plus half of what every block and the head took, auto offloads
// some blocks but not all and says the cap stopped it, greedy tokens the
// CPU's; asking for every block under that cap is refused, naming the cap.
func TestGPUMemoryCap(t *testing.T) {
	needGPU(t)
	bin := buildBinary(t)
	o := model.Presets["small"]
	o.Type = "F32" // large enough that its blocks, not the margin, decide
	path := filepath.Join(t.TempDir(), "small.gguf")
	if err := model.Generate(path, o); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (logitsReport, string, error) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"logits", "--model", path, "--prompt-ids", "1,300,301,302,17,250,99,7", "--gen", "8", "--kv-type", "f32"}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var rep logitsReport
		if err == nil {
			if jerr := json.Unmarshal(out, &rep); jerr != nil {
				t.Fatalf("orrery logits %v: %v", args, jerr)
			}
		}
		return rep, stderr.String(), err
	}
	cpu, stderr, err := run()
	if err != nil {
		t.Fatalf("CPU: %v\n%s", err, stderr)
	}
	all, stderr, err := run("--gpu-layers", "999", "--gpu-software")
	if err != nil || all.Offload.Blocks != o.Layers || !all.Offload.Head || all.Offload.GPUBytes == 0 {
		t.Fatalf("every block: offload %+v, %v\n%s", all.Offload, err, stderr)
	}
	capMiB := 128 + all.Offload.GPUBytes>>21 // the margin (offload.go) and half the blocks' bytes
	limit := fmt.Sprintf("%dMiB", capMiB)
	got, stderr, err := run("--gpu-layers", "auto", "--gpu-software", "--gpu-memory", limit)
	if err != nil {
		t.Fatalf("--gpu-memory %s: %v\n%s", limit, err, stderr)
	}
	g := got.Offload
	t.Logf("every block: %s; --gpu-memory %s: %s (%s)", all.Offload, limit, g, g.Reason)
	if g.Device == nil || g.Blocks == 0 || g.Blocks >= o.Layers || g.Head || !strings.Contains(g.Reason, "allowed by --gpu-memory") {
		t.Errorf("--gpu-memory %s: offload %+v, want some blocks but not all, the cap named in the reason", limit, g)
	}
	if g.GPUBytes >= all.Offload.GPUBytes {
		t.Errorf("--gpu-memory %s: %d bytes on the GPU, not fewer than every block's %d", limit, g.GPUBytes, all.Offload.GPUBytes)
	}
	if !slices.Equal(got.Tokens, cpu.Tokens) {
		t.Errorf("greedy tokens %v under the cap, %v on the CPU", got.Tokens, cpu.Tokens)
	}
	_, stderr, err = run("--gpu-layers", "999", "--gpu-software", "--gpu-memory", limit)
	if err == nil || !strings.Contains(stderr, "does not fit the GPU") || !strings.Contains(stderr, "allowed by --gpu-memory") {
		t.Errorf("every block under --gpu-memory %s: %v, stderr %q; want a refusal naming the cap", limit, err, stderr)
	}
}
