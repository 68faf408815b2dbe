package runnerapi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Device is a GPU a node's runners can compute on, as ggml's registry
// lists it (what a node publishes in its identity).
type Device struct {
	// ID is ggml's id of the device within its library (a Vulkan or CUDA
	// device UUID, Metal's index); Library the backend that computes on
	// it: "Metal", "CUDA", "Vulkan", "ROCm".
	ID      string `json:"id"`
	Library string `json:"library"`
	// Name is ggml's name of it ("Vulkan0", "CUDA0", "Metal"), Description
	// the driver's ("NVIDIA GeForce RTX 4090", "Apple M4 Pro", "llvmpipe
	// (LLVM 15.0.6, 256 bits)").
	Name        string `json:"name"`
	Description string `json:"description"`
	// TotalBytes and FreeBytes are its memory as the driver reports it
	// when it was listed (Metal: the recommended working-set limit, which
	// unified memory's GPU allocations count against).
	TotalBytes uint64 `json:"totalBytes"`
	FreeBytes  uint64 `json:"freeBytes"`
	// Unified is set for a GPU that shares the system's memory (Apple
	// silicon, integrated GPUs): its weights take RAM.
	Unified bool `json:"unified,omitempty"`
	// Software is set for a device that computes on the CPU (Mesa's
	// lavapipe): "auto" never offloads to one, since on a machine without
	// a GPU it is slower than the CPU backend; --gpu-software allows it.
	Software bool `json:"software,omitempty"`
}

// String names the device for logs and errors: "Vulkan0 (llvmpipe …)".
func (d Device) String() string {
	if d.Description == "" {
		return d.Name
	}
	return d.Name + " (" + d.Description + ")"
}

// IsSoftware reports whether a device of this description computes on the
// CPU: Mesa's lavapipe (llvmpipe) and Google's SwiftShader.
func IsSoftware(description string) bool {
	d := strings.ToLower(description)
	return strings.Contains(d, "llvmpipe") || strings.Contains(d, "lavapipe") || strings.Contains(d, "swiftshader")
}

// GPULayers is how many of a rank's blocks go on its node's GPU: GPUAuto
// as many as fit (the default), 0 none, N at most N. The last blocks go
// first and the output head once every block is there, as llama.cpp's
// -ngl; the token embeddings stay on the CPU, as there.
type GPULayers int

// GPUAuto offloads as many blocks as fit.
const GPUAuto GPULayers = -1

// ParseGPULayers reads "auto", "0" or a count of blocks.
func ParseGPULayers(s string) (GPULayers, error) {
	if s == "auto" || s == "" {
		return GPUAuto, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("gpu layers %q: want auto, 0 or a number of blocks", s)
	}
	return GPULayers(n), nil
}

func (g GPULayers) String() string {
	if g < 0 {
		return "auto"
	}
	return strconv.Itoa(int(g))
}

// Set reads a --gpu-layers flag (flag.Value): "auto", "0" or a number.
func (g *GPULayers) Set(s string) error {
	v, err := ParseGPULayers(s)
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// MarshalJSON writes "auto" or the number, as POST /instance takes it.
func (g GPULayers) MarshalJSON() ([]byte, error) {
	if g < 0 {
		return []byte(`"auto"`), nil
	}
	return strconv.AppendInt(nil, int64(g), 10), nil
}

// UnmarshalJSON reads "auto" or a number of blocks (≥ 0; a string of
// digits too).
func (g *GPULayers) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil // as encoding/json leaves a value it has no JSON for
	}
	if uq, err := strconv.Unquote(s); err == nil {
		if uq == "" {
			return errors.New(`gpu layers "": want "auto" or a number of blocks`)
		}
		s = uq
	}
	v, err := ParseGPULayers(s)
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// Offload is where a loaded rank's blocks went: how many of them on which
// device, and what they take there and on the CPU.
type Offload struct {
	// Device is the GPU (nil: none; every block on the CPU), and Reason why
	// not, or why fewer blocks than asked ("no GPU", "software device not
	// allowed", "out of device memory at 12 blocks; 9 loaded").
	Device *Device `json:"device,omitempty"`
	Reason string  `json:"reason,omitempty"`
	// Blocks of the rank's Total are on the GPU (its last ones), Head says
	// the output head is too.
	Blocks int  `json:"blocks"`
	Total  int  `json:"total"`
	Head   bool `json:"head,omitempty"`
	// GPUBytes and CPUBytes are the weights, KV cache and compute buffers
	// on each side, as ggml allocated them.
	GPUBytes uint64 `json:"gpuBytes,omitempty"`
	CPUBytes uint64 `json:"cpuBytes,omitempty"`
}

// String reads "12/16 blocks on Vulkan0" or "CPU".
func (o Offload) String() string {
	if o.Device == nil || o.Blocks == 0 && !o.Head {
		return "CPU"
	}
	s := fmt.Sprintf("%d/%d blocks", o.Blocks, o.Total)
	if o.Head {
		s += " and the head"
	}
	return s + " on " + o.Device.Name
}
