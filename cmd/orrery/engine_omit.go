//go:build orrery_omit_engine

package main

import (
	"context"
	"errors"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func loadRank(context.Context, string, backend.Options, func(float32)) (backend.Rank, error) {
	return nil, errors.New("this orrery was built with orrery_omit_engine: it has no compute backend")
}

func engineBuildWarning() string { return "" }

func measureCompute(context.Context, string, int) (runnerapi.Speed, error) {
	return runnerapi.Speed{}, errors.New("this orrery was built with orrery_omit_engine: it has no compute backend to measure")
}

func gpuSetup(bool) (gpuBackends, error) { return gpuBackends{}, nil }

func listGPUs(string, bool) ([]runnerapi.Device, error) { return nil, nil }

func measureGPU(context.Context, string, int, runnerapi.Device, bool) (runnerapi.GPUSpeed, error) {
	return runnerapi.GPUSpeed{}, errors.New("this orrery was built with orrery_omit_engine: it has no compute backend to measure")
}
