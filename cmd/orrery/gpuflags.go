package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// gpuFlags are the GPU controls of a command that loads a model in its
// own process: the runner, and the in-process tools (logits, perplexity,
// engine-bench, batch-bench).
type gpuFlags struct {
	layers   runnerapi.GPULayers
	software bool
	memory   memSize
}

// gpuLayersUsage and gpuSoftwareUsage describe the two flags wherever
// they appear (the agent's pass them on to its runners).
const (
	gpuLayersUsage   = "blocks of each rank on this machine's GPU: auto (as many as fit: weights, KV cache and compute buffers), 0 (none: the CPU only), or a number (at most that many, the last blocks first; above the rank's blocks, all of them and the output head, refused if they do not fit)"
	gpuSoftwareUsage = "let a software GPU (Mesa's lavapipe, which computes on the CPU) take blocks, and make it visible to ggml (GGML_VK_VISIBLE_DEVICES=0): for tests; auto never chooses one, as on a machine without a GPU the CPU backend is faster"
	gpuMemoryUsage   = "at most this much of the GPU's memory (e.g. 6GiB, 512MiB; a bare number is MiB), leaving the rest to other programs: auto fits blocks to it, and a number of blocks beyond it is refused (default: all the device has free)"
)

// addGPUFlags adds --gpu-layers (default def), --gpu-software and
// --gpu-memory to fs.
func addGPUFlags(fs *flag.FlagSet, def runnerapi.GPULayers) *gpuFlags {
	g := &gpuFlags{layers: def}
	fs.Var(&g.layers, "gpu-layers", gpuLayersUsage)
	fs.BoolVar(&g.software, "gpu-software", false, gpuSoftwareUsage)
	fs.Var(&g.memory, "gpu-memory", gpuMemoryUsage)
	return g
}

// memSize is a --gpu-memory value in bytes (0: unset).
type memSize uint64

// maxMemSize bounds --gpu-memory: 1 PiB, beyond any device, and far from
// overflowing a uint64 once scaled.
const maxMemSize = 1 << 50

func (m *memSize) String() string {
	if m == nil || *m == 0 {
		return ""
	}
	if *m%(1<<30) == 0 {
		return fmt.Sprintf("%dGiB", *m>>30)
	}
	return fmt.Sprintf("%dMiB", *m>>20)
}

// Set takes a number with a unit (KiB, MiB, GiB, TiB; also KB, MB, GB, TB,
// read as the binary units, as GPU tools print them), or a bare number of
// MiB. Fractions are allowed (1.5GiB); the result is at least 1 MiB.
func (m *memSize) Set(s string) error {
	num, unit := s, "MiB"
	if i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' }); i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	scale := map[string]float64{"KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20, "M": 1 << 20,
		"GiB": 1 << 30, "GB": 1 << 30, "G": 1 << 30, "TiB": 1 << 40, "TB": 1 << 40}[unit]
	v, err := strconv.ParseFloat(num, 64)
	switch {
	case scale == 0:
		return fmt.Errorf("%q: unit %q, want MiB, GiB or TiB (or a bare number of MiB)", s, unit)
	case err != nil || num == "":
		return fmt.Errorf("%q: want a size such as 6GiB or 512MiB", s)
	case v*scale < 1<<20 || v*scale > maxMemSize:
		return fmt.Errorf("%q: want 1MiB to 1024TiB", s)
	}
	*m = memSize(v * scale)
	return nil
}

// gpuBackends is where ggml's GPU backends load from (gpuSetup): the
// directory, the backends in it ("vulkan", "cuda"), and what keeps them
// from loading ("": nothing).
type gpuBackends struct {
	Dir     string
	Libs    []string
	Problem string
}

func (b gpuBackends) String() string {
	if b.Dir == "" {
		return "none found"
	}
	s := b.Dir + " (" + strings.Join(b.Libs, ", ") + ")"
	if b.Problem != "" {
		s += ": " + b.Problem
	}
	return s
}

// setup prepares ggml's GPU backends, as it must before the process's
// first model loads, and sets opts' GPU options. With blocks allowed on
// a GPU, warning says what keeps the backends from loading ("": nothing):
// the model then runs on the CPU, as ggml finds no device.
func (g *gpuFlags) setup(opts *backend.Options) (b gpuBackends, warning string, err error) {
	opts.GPULayers, opts.GPUSoftware, opts.GPUMemory = g.layers, g.software, uint64(g.memory)
	b, err = gpuSetup(g.software && g.layers != 0)
	if err != nil {
		return b, "", fmt.Errorf("GPU backends: %w", err)
	}
	if b.Problem != "" && g.layers != 0 {
		warning = "GPU backends: " + b.Problem + "; running on the CPU"
	}
	return b, warning, nil
}

// gpuSwitch is the agent's --gpu on|off, setting *off.
type gpuSwitch struct{ off *bool }

func (g gpuSwitch) String() string {
	switch {
	case g.off == nil: // flag's zero value, for its help
		return ""
	case *g.off:
		return "off"
	}
	return "on"
}

func (g gpuSwitch) Set(v string) error {
	switch v {
	case "on", "off":
		*g.off = v == "off"
		return nil
	}
	return fmt.Errorf("%q: want on or off", v)
}

// optionalGPULayers is a --gpu-layers flag of a command that places a
// model through an agent: unset, the placement names none and each node
// uses its own default.
type optionalGPULayers struct {
	set bool
	v   runnerapi.GPULayers
}

// optionalGPULayersFlag adds --gpu-layers to fs.
func optionalGPULayersFlag(fs *flag.FlagSet, usage string) *optionalGPULayers {
	g := &optionalGPULayers{}
	fs.Var(g, "gpu-layers", usage)
	return g
}

func (g *optionalGPULayers) String() string {
	if g == nil || !g.set {
		return ""
	}
	return g.v.String()
}

func (g *optionalGPULayers) Set(s string) error {
	if err := g.v.Set(s); err != nil {
		return err
	}
	g.set = true
	return nil
}

// value is the layers asked for, nil when none were.
func (g *optionalGPULayers) value() *runnerapi.GPULayers {
	if !g.set {
		return nil
	}
	v := g.v
	return &v
}
