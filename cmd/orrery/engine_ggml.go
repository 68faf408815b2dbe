//go:build !orrery_omit_engine

package main

import (
	"context"

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
