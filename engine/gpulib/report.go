package gpulib

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Report is what a node has for computing on a GPU, as its agent sees it
// (GET /state/gpu; orrery doctor shows it).
type Report struct {
	// OS is the node's (runtime.GOOS): on darwin Metal is compiled in and
	// Library does not apply.
	OS string `json:"os"`
	// Library is where its runners load the GPU backends from (Find).
	Library Library `json:"library"`
	// Drivers are the Vulkan drivers installed; Hardware the GPUs on the
	// PCI bus.
	Drivers  []Driver   `json:"drivers,omitempty"`
	Hardware []Hardware `json:"hardware,omitempty"`
	// Devices are the GPUs ggml listed in the node's `orrery speed` (the
	// node's identity), once DevicesListed.
	Devices       []runnerapi.Device `json:"devices,omitempty"`
	DevicesListed bool               `json:"devicesListed"`
}

// Probe is the report of this machine's backends for cfg, its drivers and
// its PCI GPUs under root ("": this machine), without devices: those only
// ggml can list (Report.Devices).
func Probe(cfg Config, root string) Report {
	lib, err := Find(cfg)
	if err != nil {
		lib.Problem = err.Error()
	}
	return Report{OS: runtime.GOOS, Library: lib, Drivers: VulkanDrivers(root, cfg.Getenv), Hardware: PCIGPUs(root)}
}

// OnGPU reports whether the node computes on a GPU by default: a device
// ggml listed that is not a software one.
func (r Report) OnGPU() bool {
	for _, d := range r.Devices {
		if !d.Software {
			return true
		}
	}
	return false
}

// Verdict says in one line whether the node computes on a GPU, and if
// not, why not and what would change that.
func (r Report) Verdict() string {
	var hard, soft []string
	for _, d := range r.Devices {
		if d.Software {
			soft = append(soft, d.String())
		} else {
			hard = append(hard, d.String())
		}
	}
	switch {
	case len(hard) > 0:
		return "GPU: " + strings.Join(hard, ", ") + ": ranks put their blocks there (--gpu-layers auto)"
	case len(soft) > 0:
		return "GPU: " + strings.Join(soft, ", ") + ", software: used only with --gpu-software; runs on the CPU otherwise"
	case r.OS == "darwin":
		if r.DevicesListed {
			return "no Metal device: runs on the CPU"
		}
		return "Metal is compiled in; its device is not listed yet (orrery speed lists it when the agent starts, unless --speed off)"
	}
	return r.linuxVerdict()
}

// linuxVerdict is Verdict where ggml listed no device.
func (r Report) linuxVerdict() string {
	gpus := make([]string, len(r.Hardware))
	for i, h := range r.Hardware {
		gpus[i] = h.String()
	}
	gpu := strings.Join(gpus, "; ")
	lib := r.Library
	switch {
	case !lib.Usable() && lib.Problem != "" && len(lib.Libs) > 0:
		return "the GPU backends cannot load (" + lib.Problem + "): runs on the CPU"
	case !lib.Usable() && gpu != "":
		return "a GPU (" + gpu + ") but no GPU backend: runs on the CPU (run make gpu; from packages, install orrery-vulkan)"
	case !lib.Usable():
		return "no GPU and no GPU backend: runs on the CPU"
	}
	noDriver := "no Vulkan driver is installed: install one, e.g. mesa-vulkan-drivers or the GPU maker's"
	if !r.DevicesListed {
		s := lib.Files() + " found; devices not listed yet (orrery speed lists them when the agent starts, unless --speed off)"
		if len(r.Drivers) == 0 && !lib.has("cuda") {
			s += ", but " + noDriver + "; until then it runs on the CPU"
		}
		return s
	}
	s := lib.Files() + " found but no " + lib.deviceKind() + " device: runs on the CPU"
	switch {
	case len(r.Drivers) == 0 && !lib.has("cuda"):
		return s + " (" + noDriver + ")"
	case gpu != "":
		return s + fmt.Sprintf(" (a GPU, %s, is there: does vulkaninfo --summary list it?)", gpu)
	case hasSoftware(r.Drivers):
		return s + " (no GPU on the PCI bus; lavapipe's device, which computes on the CPU, is used only with --gpu-software)"
	}
	return s + " (no GPU on the PCI bus)"
}

func (l Library) has(lib string) bool {
	for _, b := range l.Libs {
		if b == lib {
			return true
		}
	}
	return false
}

// deviceKind names the devices the backends would have found: "Vulkan",
// "CUDA", or "Vulkan or CUDA".
func (l Library) deviceKind() string {
	var ks []string
	for _, b := range l.Libs {
		switch b {
		case "vulkan":
			ks = append(ks, "Vulkan")
		case "cuda":
			ks = append(ks, "CUDA")
		default:
			ks = append(ks, b)
		}
	}
	return strings.Join(ks, " or ")
}

// hasSoftware reports whether a driver computes on the CPU (lavapipe).
func hasSoftware(ds []Driver) bool {
	for _, d := range ds {
		if d.Software {
			return true
		}
	}
	return false
}
