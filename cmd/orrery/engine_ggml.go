//go:build !orrery_omit_engine

package main

import (
	"context"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// loadRank loads a model's blocks on ggml (cgo). Building with the tag
// orrery_omit_engine leaves ggml out (for the darwin vet, which has no
// cgo); such a binary cannot run models.
func loadRank(ctx context.Context, path string, opts backend.Options, progress func(float32)) (backend.Rank, error) {
	return ggml.Load(ctx, path, opts, progress)
}

// engineBuildWarning says when ggml was compiled for less than this CPU
// can do (see ggml.BuildWarning); "" when all is well.
func engineBuildWarning() string { return ggml.BuildWarning() }

// measureCompute runs the compute micro-benchmark (ggml.MeasureSpeed).
func measureCompute(ctx context.Context, dir string, threads int) (runnerapi.Speed, error) {
	return ggml.MeasureSpeed(ctx, dir, threads)
}

// gpuSetup points ggml at the GPU backends before the process's first
// model (ggml.Setup: they load once, at the first); software makes a
// software Vulkan device (lavapipe) visible.
func gpuSetup(software bool) (gpuBackends, error) {
	info, err := ggml.Setup(ggml.SetupConfig{Software: software})
	return gpuBackends{Dir: info.Dir, Libs: info.Libs, Problem: info.Problem}, err
}

// listGPUs prepares ggml's GPU backends (ggml.Setup: it must come before
// the process's first backend) and lists the GPUs they see.
func listGPUs(dir string, software bool) ([]runnerapi.Device, error) {
	// Without GPU backends to load (Metal is built in on macOS) the list
	// is just empty.
	if _, err := ggml.Setup(ggml.SetupConfig{Software: software}); err != nil {
		return nil, fmt.Errorf("GPU backends: %w", err)
	}
	return ggml.ListDevices(dir)
}

// measureGPU runs the GPU micro-benchmark on d (ggml.MeasureGPU).
func measureGPU(ctx context.Context, dir string, threads int, d runnerapi.Device, software bool) (runnerapi.GPUSpeed, error) {
	return ggml.MeasureGPU(ctx, dir, threads, d, software)
}
