package conformance

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/internal/childtest"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// The GPU rows: every family in every weight type it is tested in, its
// logits with all blocks (and the head) on a GPU, and with half of them,
// against the same file on the CPU backend under the default settings.
// Without a GPU, the device is Mesa's lavapipe, Vulkan on this CPU: its
// kernels are ggml's Vulkan shaders, so the rows hold the graph as ggml's
// Vulkan backend runs it (a speed figure needs a real GPU).
//
// Each GPU load is a process of its own (gpuChild): a runner loads one
// model a process, and on lavapipe a model loaded after another was
// computed and closed has corrupted the heap (docs/conformance.md).

// gpuEnvs: ggml.LibEnv names the GPU backends (make gpu builds them into
// lib/ollama); with requiredEnv set (make test sets it), a missing one
// fails the test instead of skipping it.
const requiredEnv = "ORRERY_GPU_REQUIRED"

// gpuJob is the child's work: each file loaded with its blocks on the
// GPU as each run says, every rank kept loaded until the process ends.
type gpuJob struct {
	Lib  string
	Runs []gpuRun
}

type gpuRun struct {
	Path   string
	Layers runnerapi.GPULayers
}

// gpuResult is one run's logits, greedy tokens and where its blocks went.
type gpuResult struct {
	Logits  [][]float32
	Gen     []int32
	Offload runnerapi.Offload
}

var gpuChild = childtest.Process[gpuJob]{Env: "ORRERY_CONFORMANCE_GPU", Timeout: 30 * time.Minute, Work: runGPUJob}

// runGPUJob runs every file of the job in one process: lavapipe compiles
// each of its pipelines once a process (tens of seconds for a weight
// type's), so one process for all the rows keeps them to minutes. Nothing
// is closed before the process ends (see above).
func runGPUJob(ctx context.Context, j gpuJob) ([]byte, error) {
	info, err := ggml.Setup(ggml.SetupConfig{LibDir: j.Lib, Software: true})
	if err != nil {
		return nil, err
	}
	if info.Problem != "" {
		return nil, fmt.Errorf("GPU backends: %s", info.Problem)
	}
	var out []gpuResult
	for _, run := range j.Runs {
		o := optionsOf(settings[0])
		o.GPULayers, o.GPUSoftware = run.Layers, true
		r, err := ggml.Load(ctx, run.Path, o, nil)
		if err != nil {
			return nil, fmt.Errorf("%s with %v GPU blocks: %w", filepath.Base(run.Path), run.Layers, err)
		}
		t0 := time.Now()
		res, err := generate([]*ggml.Rank{r}, gpuPrompt(), gpuShape.Vocab, gpuGen)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(run.Path), err)
		}
		fmt.Fprintf(os.Stderr, "gpu run %s %v: %v\n", filepath.Base(run.Path), run.Layers, time.Since(t0).Round(time.Millisecond))
		out = append(out, gpuResult{Logits: finite(res.logits), Gen: res.gen, Offload: r.Offload()})
	}
	return json.Marshal(out)
}

// gpuLib is the directory of the GPU backends, or "" (the test skipped,
// or failed under ORRERY_GPU_REQUIRED).
func gpuLib(t *testing.T) string {
	dir := os.Getenv(ggml.LibEnv)
	if dir == "" {
		if os.Getenv(requiredEnv) != "" {
			t.Fatalf("%s is set but %s is not: make gpu builds the GPU backends into lib/ollama", requiredEnv, ggml.LibEnv)
		}
		t.Skipf("%s is not set: make gpu builds ggml's GPU backends, and make test runs this with them", ggml.LibEnv)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// gpuBound is the largest max |Δ| / std accepted between the GPU and the
// CPU for a weight type: measured on lavapipe, then rounded up (see
// docs/conformance.md's GPU table). The CPU rounds a product's activations
// to the weight's dot-product type (Q8_0 for the quantized types, F16 for
// F16) where lavapipe, without integer dot products, multiplies in F32,
// and the two flash-attention kernels accumulate differently.
func gpuBound(typ string, moe bool) float64 {
	b := 0.25
	switch {
	case typ == "F32":
		b = 0.02
	case typ == "F16" || typ == "BF16":
		b = 0.06
	case strings.HasPrefix(typ, "Q2") || strings.HasPrefix(typ, "Q3"):
		b = 0.5
	}
	if moe {
		b = max(b, 0.75) // a flipped expert choice at a near-tie: see checkMoE
	}
	return b
}

// The GPU rows' prompt and greedy run: shorter than the CPU rows', since
// lavapipe computes every pass's graph slowly.
const (
	gpuPromptLen = 32
	gpuGen       = 8
)

func gpuPrompt() []int32 { return promptIDs(gpuShape.Vocab)[:gpuPromptLen] }

// finite replaces the NaNs and infinities of a run's logits (which JSON
// cannot carry) by the largest float32, far beyond any bound: the row
// then fails, naming the file.
func finite(rows [][]float32) [][]float32 {
	for _, r := range rows {
		for i, v := range r {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				r[i] = math.MaxFloat32
			}
		}
	}
	return rows
}

// gpuShape is the GPU rows' model: the conformance shape, smaller (two
// blocks, the rows still multiples of 256 for the K-quants), so that every
// family's file in every type fits lavapipe's 2 GiB at once.
var gpuShape = model.GenOptions{Layers: 2, Dim: 256, FFDim: 768, Heads: 4, KVHeads: 2, Vocab: 1024, ContextLen: 256, Seed: 11}

// TestGPUMatchesCPU holds every family and weight type's logits on a GPU,
// with all blocks and the head there, and with half of the blocks, to the
// CPU backend's on the same file, under the default settings (flash
// attention, f16 KV cache). -run 'TestGPUMatchesCPU/qwen3' runs one
// family's rows, but the GPU runs all of them in one process first.
func TestGPUMatchesCPU(t *testing.T) {
	lib := gpuLib(t)
	dir := llamaref.Require(t, "bin/llama-quantize")
	ids := gpuPrompt()
	type file struct {
		family, name string
		v            variant
		moe          bool
		refused      bool // the GPU must refuse it (vulkanRefuses)
		cpu          result
		runs         []int // indices into the job's runs
	}
	var files []file
	var job gpuJob
	job.Lib = lib
	for _, fam := range families {
		name := cmp.Or(fam.name, fam.family)
		o, err := model.ApplyFamily(gpuShape, fam.family)
		if err != nil {
			t.Fatal(err)
		}
		if fam.tweak != nil {
			fam.tweak(&o)
		}
		for _, v := range variants {
			if fam.types != nil && !slices.Contains(fam.types, v.typ) || fam.types == nil && mxfp4(v.typ) {
				continue
			}
			path := variantFile(t, dir, o, name, v)
			f := file{family: fam.family, name: name, v: v, moe: o.Experts > 0, refused: vulkanRefuses(t, path),
				cpu: runOrreryShape(t, path, ids, gpuShape.Vocab)}
			runs := []runnerapi.GPULayers{runnerapi.GPUAuto, runnerapi.GPULayers(o.Layers / 2)}
			if f.refused {
				runs = runs[:1] // the half asked for explicitly would be refused
			}
			for _, n := range runs {
				f.runs = append(f.runs, len(job.Runs))
				job.Runs = append(job.Runs, gpuRun{Path: path, Layers: n})
			}
			files = append(files, f)
		}
	}
	start := time.Now()
	var got []gpuResult
	if err := json.Unmarshal(gpuChild.Run(t, job), &got); err != nil || len(got) != len(job.Runs) {
		t.Fatalf("%d results for %d runs (%v)", len(got), len(job.Runs), err)
	}
	t.Logf("%d GPU runs of %d files in %v", len(job.Runs), len(files), time.Since(start).Round(time.Second))
	var rows []gpuRow
	for _, f := range files {
		t.Run(f.name+"/"+f.v.typ, func(t *testing.T) {
			for k, i := range f.runs {
				r := gpuCompare(f.cpu, got[i])
				r.arch, r.typ = f.name, f.v.typ
				rows = append(rows, r)
				checkGPU(t, f.v, f.moe, f.refused, r, got[i].Offload, gpuShape.Layers, k == 0)
			}
		})
	}
	t.Log("\n" + gpuTable(rows))
}

// runOrreryShape is the file's result on the CPU, one rank.
func runOrreryShape(t *testing.T, path string, ids []int32, vocab int) result {
	t.Helper()
	r, err := ggml.Load(context.Background(), path, optionsOf(settings[0]), nil)
	if err != nil {
		t.Fatalf("load %s: %v", filepath.Base(path), err)
	}
	defer r.Close()
	res, err := generate([]*ggml.Rank{r}, ids, vocab, gpuGen)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// variantFile writes the family's file in v's type: generated, or
// quantized from the F32 file by llama-quantize.
func variantFile(t *testing.T, dir string, o model.GenOptions, name string, v variant) string {
	t.Helper()
	work := t.TempDir()
	base := filepath.Join(work, name+"-F32.gguf")
	o.Type = "F32"
	if err := model.Generate(base, o); err != nil {
		t.Fatal(err)
	}
	return variantOf(t, dir, o, work, name, base, v)
}

// variantOf is the family's file in v's type, in work: the F32 file base
// itself, quantized from it by llama-quantize, or generated in the type.
func variantOf(t *testing.T, dir string, o model.GenOptions, work, name, base string, v variant) string {
	t.Helper()
	path := filepath.Join(work, name+"-"+v.typ+".gguf")
	switch {
	case v.typ == "F32":
		return base
	case v.quantize:
		quantize(t, dir, base, path, v.typ)
	default:
		o.Type = v.typ
		if err := model.Generate(path, o); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// gpuRow is one GPU run against the CPU.
type gpuRow struct {
	arch, typ string
	offload   string
	row
}

func gpuCompare(cpu result, g gpuResult) gpuRow {
	r := compare(cpu, result{logits: g.Logits, gen: g.Gen})
	return gpuRow{offload: g.Offload.String(), row: r}
}

// checkGPU holds a GPU run to its type's bound, wants its blocks where
// they were asked to go, and allows a greedy divergence only at a near-tie
// (the CPU's top-2 gap within 4 rms of the two's difference).
func checkGPU(t *testing.T, v variant, moe, refused bool, r gpuRow, off runnerapi.Offload, layers int, whole bool) {
	t.Helper()
	what := fmt.Sprintf("%s-%s, %s", r.arch, r.typ, r.offload)
	if refused {
		// Auto keeps every block on the CPU and says why (the half, asked
		// for explicitly, would be refused: it is not run).
		if off.Device != nil || !strings.Contains(off.Reason, "Vulkan shaders compute wrong") || r.maxDelta != 0 {
			t.Errorf("%s: offload %+v (max |Δ|/std %.2g), want every block on the CPU and why", what, off, r.maxDelta)
		}
		return
	}
	want := layers / 2
	if whole {
		want = layers
	}
	switch {
	case off.Device == nil || !off.Device.Software || off.Device.Library != "Vulkan":
		t.Errorf("%s: offload %+v, want lavapipe (Vulkan, software)", what, off)
	case off.Blocks != want || off.Head != whole:
		t.Errorf("%s: %d blocks on the GPU (head %v), want %d (head %v)", what, off.Blocks, off.Head, want, whole)
	}
	if b := gpuBound(v.typ, moe); r.maxDelta > b || math.IsNaN(r.maxDelta) {
		t.Errorf("%s: max |Δ|/std %.2g against the CPU, over %.2g", what, r.maxDelta, b)
	}
	if r.diverge >= 0 && r.gap > 4*r.rmsDelta && !moe {
		t.Errorf("%s: greedy output diverges at token %d where the CPU's top-2 gap %.3g is beyond the two's noise (4 × rms Δ = %.3g)", what, r.diverge, r.gap, 4*r.rmsDelta)
	}
}

func gpuTable(rows []gpuRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| arch | type | offload | top-1 agreement | max \\|Δ\\| / std | rms Δ | first greedy divergence (of %d) |\n", genLen)
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		div := "none"
		if r.diverge >= 0 {
			div = fmt.Sprintf("%d (gap %.2g rms Δ)", r.diverge, r.gap/r.rmsDelta)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f %% | %.2g | %.2g | %s |\n", r.arch, r.typ, r.offload, 100*r.top1, r.maxDelta, r.rmsDelta, div)
	}
	return b.String()
}

// vulkanRefuses reports a file the Vulkan backend must not take (ggml's
// unsupported: deepseek2's attn_k_b or attn_v_b in a K-quant).
func vulkanRefuses(t *testing.T, path string) bool {
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		if (strings.HasSuffix(ti.Name, ".attn_k_b.weight") || strings.HasSuffix(ti.Name, ".attn_v_b.weight")) && strings.HasSuffix(ti.Type.String(), "_K") {
			return true
		}
	}
	return false
}
