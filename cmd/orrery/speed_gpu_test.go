package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// gpuLib is where make gpu put ggml's GPU backends; GPU tests run when it
// is set (make gpu-test and CI set it) and skip otherwise.
func gpuLib(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ORRERY_GPU_LIB")
	if dir == "" {
		t.Skip("ORRERY_GPU_LIB is not set: make gpu builds ggml's GPU backends into lib/ollama; set it to that directory")
	}
	return dir
}

// `orrery speed --gpu-software` measures the software Vulkan device
// (lavapipe here) as it measures the CPU, in a child process, and lists
// it with its memory; without --gpu-software it lists no software device.
func TestSpeedMeasuresGPU(t *testing.T) {
	lib := gpuLib(t)
	if testing.Short() {
		t.Skip("slow: lavapipe takes about 40 s to measure")
	}
	bin := buildBinary(t)
	run := func(args ...string) runnerapi.Speed {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"speed", "--json", "--threads", "1", "--dir", t.TempDir()}, args...)...)
		// What a node's environment may hold would decide for the flag.
		cmd.Env = append(os.Environ(), "ORRERY_GPU_LIB="+lib, "GGML_VK_VISIBLE_DEVICES=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("orrery speed %v: %v", args, err)
		}
		var sp runnerapi.Speed
		if err := json.Unmarshal(out, &sp); err != nil {
			t.Fatalf("orrery speed %v: %v: %s", args, err, out)
		}
		if err := sp.Check(); err != nil {
			t.Fatalf("orrery speed %v: the CPU's figures: %v", args, err)
		}
		return sp
	}
	sp := run("--gpu-software")
	var vk *runnerapi.GPUSpeed
	for i, g := range sp.GPUs {
		t.Logf("GPU %s: %.1f s, memory %.2f GB/s, stream ratio %.2f, %.0f µs per block, %.0f per pass, %.0f per host trip, error %q",
			g.Device, g.Seconds, g.MemBytesPerSec/1e9, g.StreamRatio, g.LayerMicros, g.TokenMicros, g.CrossMicros, g.Error)
		if g.Device.Library == "Vulkan" && g.Device.Software {
			vk = &sp.GPUs[i]
		}
	}
	if vk == nil {
		t.Fatalf("no software Vulkan device among %d GPUs measured: is Mesa's lavapipe installed?", len(sp.GPUs))
	}
	if err := vk.Check(); err != nil {
		t.Fatal(err)
	}
	if vk.Device.TotalBytes == 0 || vk.Device.FreeBytes == 0 || vk.Device.ID == "" {
		t.Errorf("device listed without its memory or id: %+v", vk.Device)
	}
	for _, typ := range []string{"F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"} {
		ts, ok := vk.Types[typ]
		if !ok || ts.DecodeBytesPerSec <= 0 || ts.PrefillFlopsPerSec <= 0 || ts.BitsPerWeight <= 0 {
			t.Errorf("%s on the GPU: %+v (measured %v)", typ, ts, ok)
		}
	}
	if vk.LayerMicros <= 0 || vk.CrossMicros <= 0 || vk.StreamRatio <= 0 {
		t.Errorf("a pass's costs on the GPU: %.0f µs per block, %.0f µs per host trip, stream ratio %.2f", vk.LayerMicros, vk.CrossMicros, vk.StreamRatio)
	}
	if g, ok := sp.GPU(vk.Device.ID, vk.Device.Library); !ok || g.Device != vk.Device {
		t.Errorf("Speed.GPU does not find the device measured: %+v", g)
	}
	for _, g := range run().GPUs {
		if g.Device.Software {
			t.Errorf("without --gpu-software, a software device was listed: %s", g.Device)
		}
	}
}
