package ggml

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/gpulib/gpulibtest"
)

// gpuLibEnv names the directory holding the GPU backends make gpu built
// (libggml-vulkan.so, libggml-base.so, libggml-cuda.so where built;
// make gpu-test and make test set it to lib/ollama). Unset, TestGPUMatmul
// skips, or fails where gpulib.RequiredEnv is set (make test, CI).
const gpuLibEnv = LibEnv

// setGPUEnv points ollama's loader at $ORRERY_GPU_LIB (Setup), with the
// software device (lavapipe) visible. It must run before anything in the
// process calls ml.NewBackend: ollama loads the GPU backends once, at the
// first. TestMain calls it.
func setGPUEnv() error {
	dir := os.Getenv(gpuLibEnv)
	if dir == "" {
		return nil
	}
	info, err := Setup(SetupConfig{LibDir: dir, Software: true})
	if err != nil {
		return err
	}
	if info.Problem != "" {
		return fmt.Errorf("%s: %s", gpuLibEnv, info.Problem)
	}
	return nil
}

// The products computed: a weight of mmRows rows of mmCols (ggml's shape
// {mmCols, mmRows}) times mmBatch activations of mmCols: small, since
// lavapipe compiles each pipeline on first use.
const (
	mmCols  = 64
	mmRows  = 64
	mmBatch = 8
	// mmVocab is the rows of the token embedding and the output head.
	mmVocab = 16
)

// TestGPUMatmul computes a product on each GPU device ollama's ggml sees
// and on the CPU, for F32, F16, Q8_0 and Q4_0 weights, through ollama's ml
// API as the engine uses it: the weight is block 0 of a one-block model,
// put on the device by BackendParams.GPULayers with the device's id from
// BackendDevices. It fails unless one of the devices is Vulkan's (Mesa's
// lavapipe on a machine without a GPU); a CUDA device, where make gpu
// built ggml-cuda, is held to the same.
//
// Two sets of activations: exact ones, which F16 and Q8_0 hold without
// rounding (multiples of 1/128 up to 127/128, each block of 32 reaching
// it), so that the CPU's conversion of the activations to its dot
// products' type (F16 for F16 weights, Q8_0 for Q8_0 and Q4_0) loses
// nothing and the two devices' products must agree; and Gaussian ones,
// where the CPU rounds (logged) while lavapipe, without integer dot
// products, multiplies in F32: the device's product is held to the float64
// product of the weight as stored.
func TestGPUMatmul(t *testing.T) {
	gpulibtest.Lib(t)
	t.Logf("OLLAMA_LIBRARY_PATH=%s GGML_VK_VISIBLE_DEVICES=%s MESA_SHADER_CACHE_DIR=%s",
		os.Getenv("OLLAMA_LIBRARY_PATH"), os.Getenv("GGML_VK_VISIBLE_DEVICES"), os.Getenv("MESA_SHADER_CACHE_DIR"))
	rng := rand.New(rand.NewPCG(1, 2))
	gauss := func(n int, std float64) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64() * std)
		}
		return s
	}
	exactX := make([]float32, mmCols*mmBatch)
	for i := range exactX {
		q := rng.IntN(255) - 127
		if i%32 == 0 {
			q = 127 // each block's largest magnitude: Q8_0's scale is 1/128
		}
		exactX[i] = float32(q) / 128
	}
	xs := [][]float32{exactX, gauss(mmCols*mmBatch, 1)}
	w := gauss(mmCols*mmRows, 0.1)
	emb := gauss(mmCols*mmVocab, 1)
	head := gauss(mmCols*mmVocab, 0.1)
	dir := t.TempDir()

	var devices []ml.DeviceInfo
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_0} {
		path := filepath.Join(dir, typ.String()+".gguf")
		wdata := writeGPUModel(t, path, typ, w, emb, head)
		if devices == nil {
			devices = gpuDevices(t, path)
		}
		cpu := gpuRun(t, path, nil, xs)
		gx := exactProduct(t, typ, wdata, xs[1])
		for _, d := range devices {
			t.Run(typ.String()+"/"+d.Name, func(t *testing.T) {
				gpu := gpuRun(t, path, &d.DeviceID, xs)
				wantPlacement(t, d.DeviceID, cpu, gpu)
				t.Logf("%s on %s: load %v, first compute %v, second %v; CPU: first compute %v",
					typ, d.Name, gpu.load, gpu.first, gpu.second, cpu.first)
				check := func(what string, got, want []float32) {
					t.Helper()
					e := nmse(got, want)
					t.Logf("%s on %s: NMSE of %s: %.3g", typ, d.Name, what, e)
					if !(e <= 1e-5) {
						t.Errorf("%s on %s: NMSE of %s %.3g, want ≤ 1e-5", typ, d.Name, what, e)
					}
				}
				check("the device against the CPU, exact activations", gpu.ys[0], cpu.ys[0])
				check("the device against the CPU, the head (token_embd rows, then output)", gpu.head, cpu.head)
				check("the device against float64, Gaussian activations", gpu.ys[1], gx)
				t.Logf("%s on %s: Gaussian activations: NMSE of the CPU against float64 (the CPU rounds them to its dot products' type) %.3g; of the device against the CPU %.3g",
					typ, d.Name, nmse(cpu.ys[1], gx), nmse(gpu.ys[1], cpu.ys[1]))
			})
		}
	}
}

// wantPlacement checks where ollama put the weights and computed, the CPU
// run all on the CPU, the GPU run's block and head on the device dev.
func wantPlacement(t *testing.T, dev ml.DeviceID, cpu, gpu gpuResult) {
	t.Helper()
	// The weights, by ollama's own accounting (BackendMemory, kept as it
	// creates each tensor in its device's buffer type): block 0 and the
	// output head (layer blockCount) on the device, the token
	// embedding on the CPU (InputWeights).
	wantDevice(t, "GPU run", gpu.mem, dev, 0, true)
	wantDevice(t, "GPU run", gpu.mem, dev, 1, true)
	wantDevice(t, "CPU run", cpu.mem, dev, 0, false)
	wantDevice(t, "CPU run", cpu.mem, dev, 1, false)
	if gpu.mem.InputWeights == 0 {
		t.Errorf("GPU run: no input weights on the CPU; ollama keeps token_embd there")
	}
	// The computation: the GPU run's graph needed memory on the device
	// (the products' outputs), the CPU run's none there. A product
	// cannot run away from its weight's device: ggml's scheduler aborts
	// rather than copy a weight (ggml_backend_sched_backend_id_from_cur).
	if g := deviceMemory(gpu.mem, dev); g == nil || g.Graph == 0 {
		t.Errorf("GPU run: no compute graph memory on %v: nothing ran there", dev)
	}
	if g := deviceMemory(cpu.mem, dev); g != nil && g.Graph != 0 {
		t.Errorf("CPU run: %d bytes of compute graph on %v", g.Graph, dev)
	}
	// ollama's BackendDevices lists the GPUs the scheduler uses: none for
	// the CPU run, the device for the GPU run.
	if len(cpu.devices) != 0 {
		t.Errorf("CPU run: the scheduler uses %d GPU devices, want none", len(cpu.devices))
	}
	if len(gpu.devices) != 1 || gpu.devices[0].DeviceID != dev {
		t.Errorf("GPU run: the scheduler uses %v, want only %v", gpu.devices, dev)
	}
}

// writeGPUModel writes a one-block model: blk.0.w, the weight w stored
// as typ (returned as stored), beside an F32 token embedding and output
// head, which ollama places as it would a real model's.
func writeGPUModel(t *testing.T, path string, typ gguf.TensorType, w, emb, head []float32) []byte {
	t.Helper()
	var data []byte
	var err error
	switch typ {
	case gguf.F32:
		data = f32Bytes(w)
	case gguf.F16:
		for _, v := range w {
			data = binary.LittleEndian.AppendUint16(data, gguf.Float32ToF16(v))
		}
	case gguf.Q8_0:
		data, err = gguf.AppendQ8_0(nil, w)
	case gguf.Q4_0:
		data, err = gguf.AppendQ4_0(nil, w)
	default:
		t.Fatalf("no writer for %s", typ)
	}
	if err != nil {
		t.Fatal(err)
	}
	tensor := func(name string, typ gguf.TensorType, rows int, b []byte) gguf.WriteTensor {
		return gguf.WriteTensor{Name: name, Type: typ, Dims: []uint64{mmCols, uint64(rows)},
			Data: func(w io.Writer) error { _, err := w.Write(b); return err }}
	}
	const arch = "orrery-gpu-test"
	kvs := []gguf.KV{{Key: "general.architecture", Value: arch}, {Key: arch + ".block_count", Value: uint32(1)}}
	ts := []gguf.WriteTensor{
		tensor("token_embd.weight", gguf.F32, mmVocab, f32Bytes(emb)),
		tensor("blk.0.w", typ, mmRows, data),
		tensor("output.weight", gguf.F32, mmVocab, f32Bytes(head)),
	}
	if err := gguf.WriteFile(path, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return data
}

func f32Bytes(s []float32) []byte {
	b := make([]byte, 0, 4*len(s))
	for _, v := range s {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// gpuDevices lists the GPU devices ollama's ggml sees, and fails unless
// one is Vulkan's. It asks a backend that allocates nothing: one that does
// lists only the devices it has put layers on (ollama's BackendDevices
// skips idle ones), and the CPU never.
func gpuDevices(t *testing.T, path string) []ml.DeviceInfo {
	t.Helper()
	be, err := ml.NewBackend(path, ml.BackendParams{AllocMemory: false, NumThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	devices := be.BackendDevices()
	vulkan := false
	for _, d := range devices {
		t.Logf("device %s (%s): id %q, library %q, integrated %v, memory %d MiB total, %d MiB free, compute %d.%d, driver %d.%d, PCI %q, loaded from %v",
			d.Name, d.Description, d.ID, d.Library, d.Integrated, d.TotalMemory>>20, d.FreeMemory>>20,
			d.ComputeMajor, d.ComputeMinor, d.DriverMajor, d.DriverMinor, d.PCIID, d.LibraryPath)
		vulkan = vulkan || d.Library == "Vulkan"
	}
	if !vulkan {
		t.Fatalf("no Vulkan device among ollama's %d GPU devices: is Mesa's lavapipe (mesa-vulkan-drivers) installed, and does vulkaninfo --summary list it?", len(devices))
	}
	return devices
}

// gpuResult is one backend's products and what it reported.
type gpuResult struct {
	ys                  [][]float32 // blk.0.w × each set of activations
	head                []float32   // output.weight × token_embd's rows
	mem                 ml.BackendMemory
	devices             []ml.DeviceInfo
	load, first, second time.Duration
}

// gpuRun loads the model at path, its block and output head on gpu (nil:
// all on the CPU), and computes blk.0.w × each of xs, and the output head
// of the token embedding's rows 0, 2, … (mmBatch of them).
func gpuRun(t *testing.T, path string, gpu *ml.DeviceID, xs [][]float32) gpuResult {
	t.Helper()
	params := ml.BackendParams{AllocMemory: true, NumThreads: 2}
	if gpu != nil {
		// Layer 1, the block count, is ollama's index of the output layer.
		params.GPULayers = ml.GPULayersList{{DeviceID: *gpu, Layers: []int{0, 1}}}
	}
	start := time.Now()
	be, err := ml.NewBackend(path, params)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if err := be.Load(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	r := gpuResult{load: time.Since(start), devices: be.BackendDevices()}
	ids := make([]int32, mmBatch)
	for i := range ids {
		ids[i] = int32(i * 2 % mmVocab)
	}
	graph := func(c ml.Context) (out []ml.Tensor) {
		for _, x := range xs {
			out = append(out, be.Get("blk.0.w").Mulmat(c, c.Input().FromFloats(x, mmCols, mmBatch)))
		}
		out = append(out, be.Get("output.weight").Mulmat(c, be.Get("token_embd.weight").Rows(c, c.Input().FromInts(ids, mmBatch))))
		c.Forward(out...)
		return out
	}
	// Reserve records in BackendMemory the compute memory the graph needs
	// on each device. It gets a context of its own, as in ollama's runner:
	// on lavapipe, a context computed after its own Reserve gave garbage
	// (values near 1e28), the next one the right products.
	c := be.NewContext()
	graph(c)
	c.Reserve()
	c.Close()
	compute := func() [][]float32 {
		c := be.NewContext()
		defer c.Close()
		out := graph(c)
		c.Compute(out...)
		var fs [][]float32
		for _, o := range out {
			fs = append(fs, o.Floats())
		}
		return fs
	}
	start = time.Now()
	first := compute()
	r.first = time.Since(start)
	start = time.Now()
	second := compute()
	r.second = time.Since(start)
	for i := range first {
		if e := nmse(second[i], first[i]); !(e <= 1e-12) {
			t.Errorf("product %d computed twice: NMSE %.3g between the two", i, e)
		}
	}
	r.ys, r.head = first[:len(xs)], first[len(xs)]
	r.mem = be.BackendMemory()
	return r
}

// deviceMemory is the memory ollama accounts to device id (nil: none).
func deviceMemory(m ml.BackendMemory, id ml.DeviceID) *ml.DeviceMemory {
	for i := range m.GPUs {
		if m.GPUs[i].DeviceID == id {
			return &m.GPUs[i]
		}
	}
	return nil
}

// wantDevice checks that layer's weights are on the GPU id (onGPU) or on
// the CPU.
func wantDevice(t *testing.T, run string, m ml.BackendMemory, id ml.DeviceID, layer int, onGPU bool) {
	t.Helper()
	var g uint64
	if d := deviceMemory(m, id); d != nil {
		g = d.Weights[layer]
	}
	c := m.CPU.Weights[layer]
	if onGPU && (g == 0 || c != 0) || !onGPU && (g != 0 || c == 0) {
		t.Errorf("%s: layer %d's weights: %d bytes on %v, %d on the CPU; want them on the %s", run, layer, g, id, c,
			map[bool]string{true: "GPU", false: "CPU"}[onGPU])
	}
}

// exactProduct is the weight as stored times x, in float64.
func exactProduct(t *testing.T, typ gguf.TensorType, data []byte, x []float32) []float32 {
	t.Helper()
	w, err := gguf.Dequantize(typ, data, mmCols*mmRows)
	if err != nil {
		t.Fatal(err)
	}
	y := make([]float32, mmRows*mmBatch)
	for j := range mmBatch {
		for i := range mmRows {
			var s float64
			for k := range mmCols {
				s += w[i*mmCols+k] * float64(x[j*mmCols+k])
			}
			y[j*mmRows+i] = float32(s)
		}
	}
	return y
}

// nmse is Σ(a−b)² / Σb²: b is the reference.
func nmse(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return num / den
}
