package agent

import (
	"slices"

	"github.com/orrery-cluster/orrery/engine/gpulib"
)

// gpuView answers GET /state/gpu for orrery doctor. The agent has no cgo
// and cannot ask ggml, so it says what it can see for itself, at each
// request: where the binary its runners run would load the GPU backends
// from (gpulib.Find, with the environment they inherit), the Vulkan
// drivers and the PCI GPUs; and the devices ggml listed in the node's
// orrery speed (its identity), once that ran.
type gpuView struct{ a *Agent }

func (v gpuView) GPUReport() gpulib.Report {
	r := gpulib.Probe(gpulib.Config{Exe: v.a.exe}, "")
	v.a.idMu.Lock()
	r.Devices = slices.Clone(v.a.identity.GPUs)
	r.DevicesListed = v.a.identity.Speed != nil
	v.a.idMu.Unlock()
	return r
}
