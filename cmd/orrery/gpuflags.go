package main

import (
	"flag"
	"fmt"
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
}

// gpuLayersUsage and gpuSoftwareUsage describe the two flags wherever
// they appear (the agent's pass them on to its runners).
const (
	gpuLayersUsage   = "blocks of each rank on this machine's GPU: auto (as many as fit: weights, KV cache and compute buffers), 0 (none: the CPU only), or a number (at most that many, the last blocks first; above the rank's blocks, all of them and the output head, refused if they do not fit)"
	gpuSoftwareUsage = "let a software GPU (Mesa's lavapipe, which computes on the CPU) take blocks, and make it visible to ggml (GGML_VK_VISIBLE_DEVICES=0): for tests; auto never chooses one, as on a machine without a GPU the CPU backend is faster"
)

// addGPUFlags adds --gpu-layers (default def) and --gpu-software to fs.
func addGPUFlags(fs *flag.FlagSet, def runnerapi.GPULayers) *gpuFlags {
	g := &gpuFlags{layers: def}
	fs.Var(&g.layers, "gpu-layers", gpuLayersUsage)
	fs.BoolVar(&g.software, "gpu-software", false, gpuSoftwareUsage)
	return g
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
	opts.GPULayers, opts.GPUSoftware = g.layers, g.software
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
