package runner

import (
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The runner's "runner loaded" line says where the blocks went and why
// not all of them.
func TestOffloadText(t *testing.T) {
	dev := &runnerapi.Device{Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)"}
	for _, c := range []struct {
		o    runnerapi.Offload
		want string
	}{
		{runnerapi.Offload{Total: 8, Reason: "--gpu-layers 0"}, "CPU: --gpu-layers 0"},
		{runnerapi.Offload{Device: dev, Blocks: 8, Total: 8, Head: true}, "8/8 blocks and the head on Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))"},
		{runnerapi.Offload{Device: dev, Blocks: 3, Total: 8, Reason: "--gpu-layers 3"}, "3/8 blocks on Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)): --gpu-layers 3"},
	} {
		if got := offloadText(c.o); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}

// A draft model goes on the GPU unless its target may not.
func TestDraftGPULayers(t *testing.T) {
	for target, want := range map[runnerapi.GPULayers]runnerapi.GPULayers{0: 0, runnerapi.GPUAuto: runnerapi.GPUAuto, 5: runnerapi.GPUAuto} {
		if got := draftGPULayers(target); got != want {
			t.Errorf("target %v: draft %v, want %v", target, got, want)
		}
	}
}
