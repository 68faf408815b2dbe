package gpulib

import (
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func TestVerdict(t *testing.T) {
	vulkan := Library{Dir: "/usr/lib/orrery/lib/ollama", From: FromExecutable, Libs: []string{"vulkan"}, Ollama: "v0.17.4"}
	broken := vulkan
	broken.Problem = "libggml-base.so.0, which the GPU backends link to, is missing from /usr/lib/orrery/lib/ollama (run make gpu)"
	lvp := runnerapi.Device{ID: "6d65", Library: "Vulkan", Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)", Software: true}
	nv := runnerapi.Device{ID: "GPU-1", Library: "Vulkan", Name: "Vulkan1", Description: "NVIDIA GeForce RTX 4090"}
	metal := runnerapi.Device{ID: "0", Library: "Metal", Name: "Metal", Description: "Apple M4 Pro", Unified: true}
	mesa := []Driver{{Name: "intel_icd"}, {Name: "lvp_icd", Software: true}, {Name: "radeon_icd"}}
	nvidia := []Hardware{{PCI: "0000:01:00.0", Vendor: "NVIDIA", Driver: "nvidia"}}
	tests := []struct {
		name  string
		r     Report
		want  string
		onGPU bool
	}{
		{name: "a GPU beside lavapipe",
			r:    Report{OS: "linux", Library: vulkan, Drivers: mesa, Hardware: nvidia, Devices: []runnerapi.Device{lvp, nv}, DevicesListed: true},
			want: "GPU: Vulkan1 (NVIDIA GeForce RTX 4090): ranks put their blocks there (--gpu-layers auto)", onGPU: true},
		{name: "lavapipe only",
			r:    Report{OS: "linux", Library: vulkan, Drivers: mesa, Devices: []runnerapi.Device{lvp}, DevicesListed: true},
			want: "GPU: Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)), software: used only with --gpu-software; runs on the CPU otherwise"},
		{name: "a library, no driver",
			r:    Report{OS: "linux", Library: vulkan, DevicesListed: true},
			want: "libggml-vulkan.so found but no Vulkan device: runs on the CPU (no Vulkan driver is installed: install one, e.g. mesa-vulkan-drivers or the GPU maker's)"},
		{name: "a library, lavapipe not allowed",
			r:    Report{OS: "linux", Library: vulkan, Drivers: mesa, DevicesListed: true},
			want: "libggml-vulkan.so found but no Vulkan device: runs on the CPU (no GPU on the PCI bus; lavapipe's device, which computes on the CPU, is used only with --gpu-software)"},
		{name: "a library and a GPU, no device",
			r:    Report{OS: "linux", Library: vulkan, Drivers: mesa, Hardware: nvidia, DevicesListed: true},
			want: "libggml-vulkan.so found but no Vulkan device: runs on the CPU (a GPU, NVIDIA GPU at 0000:01:00.0, driver nvidia, is there: does vulkaninfo --summary list it?)"},
		{name: "a library, devices not listed yet",
			r:    Report{OS: "linux", Library: vulkan, Drivers: mesa},
			want: "libggml-vulkan.so found; devices not listed yet (orrery speed lists them when the agent starts, unless --speed off)"},
		{name: "a library, not listed yet, no driver",
			r:    Report{OS: "linux", Library: vulkan},
			want: "libggml-vulkan.so found; devices not listed yet (orrery speed lists them when the agent starts, unless --speed off), but no Vulkan driver is installed: install one, e.g. mesa-vulkan-drivers or the GPU maker's; until then it runs on the CPU"},
		{name: "a GPU, no library",
			r:    Report{OS: "linux", Drivers: mesa, Hardware: nvidia, DevicesListed: true},
			want: "a GPU (NVIDIA GPU at 0000:01:00.0, driver nvidia) but no GPU backend: runs on the CPU (run make gpu; from packages, install orrery-vulkan)"},
		{name: "neither",
			r:    Report{OS: "linux", DevicesListed: true},
			want: "no GPU and no GPU backend: runs on the CPU"},
		{name: "a library that cannot load",
			r:    Report{OS: "linux", Library: broken, Drivers: mesa, Hardware: nvidia, DevicesListed: true},
			want: "the GPU backends cannot load (" + broken.Problem + "): runs on the CPU"},
		{name: "CUDA and Vulkan, no device",
			r:    Report{OS: "linux", Library: Library{Dir: "/x/lib/ollama", Libs: []string{"cuda", "vulkan"}}, DevicesListed: true},
			want: "libggml-cuda.so, libggml-vulkan.so found but no CUDA or Vulkan device: runs on the CPU (no GPU on the PCI bus)"},
		{name: "Metal",
			r:    Report{OS: "darwin", Devices: []runnerapi.Device{metal}, DevicesListed: true},
			want: "GPU: Metal (Apple M4 Pro): ranks put their blocks there (--gpu-layers auto)", onGPU: true},
		{name: "no Metal device",
			r:    Report{OS: "darwin", DevicesListed: true},
			want: "no Metal device: runs on the CPU"},
		{name: "Metal not listed yet",
			r:    Report{OS: "darwin"},
			want: "Metal is compiled in; its device is not listed yet (orrery speed lists it when the agent starts, unless --speed off)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Verdict(); got != tc.want {
				t.Errorf("Verdict:\n got %s\nwant %s", got, tc.want)
			}
			if got := tc.r.OnGPU(); got != tc.onGPU {
				t.Errorf("OnGPU %v, want %v", got, tc.onGPU)
			}
		})
	}
}
