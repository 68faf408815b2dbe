package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/orrery-cluster/orrery/agent/speed"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// measureSpeed gets this node's compute speed for placement's cost model
// (Config.Speed; see package speed) and publishes it with the node's
// identity, and the GPUs it lists (measured or not) as the node's.
func (a *Agent) measureSpeed(ctx context.Context, exe string) {
	threads := a.cfg.RunnerThreads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	sp, err := speed.Get(ctx, speed.Config{Source: a.cfg.Speed, Exe: exe, Dir: a.cfg.DataDir, Threads: threads, Version: a.cfg.Version,
		Machine: fmt.Sprintf("%s/%s/%d cpus/%s", a.identity.ChipID, a.identity.ModelID, a.identity.CPUCount, runtime.GOARCH),
		GPUs:    speed.GPUs{Software: a.cfg.GPUSoftware, None: a.cfg.NoGPU}, Busy: a.runnersBusy, Logger: a.log})
	switch {
	case errors.Is(err, speed.ErrOff) || ctx.Err() != nil:
		return
	case err != nil:
		a.log.Warn("no speed for the placement cost model: other nodes' figures stand in for this one's", "source", a.cfg.Speed, "err", err)
		return
	}
	a.idMu.Lock()
	a.identity.Speed = &sp
	a.identity.GPUs = capFree(sp.Devices(), a.cfg.GPUMemory)
	a.idMu.Unlock()
	a.publishIdentity()
}

// runnersBusy reports whether a runner of this node is loading or serving.
func (a *Agent) runnersBusy() bool {
	for _, r := range a.store.State().Runners {
		if r.NodeID == a.identity.NodeID && (r.Status == state.RunnerLoading || r.Status == state.RunnerRunning) {
			return true
		}
	}
	return false
}

// capFree lowers each device's free memory to limit (0: none), so that
// placement counts on no more of it than --gpu-memory lets a runner take.
func capFree(ds []runnerapi.Device, limit uint64) []runnerapi.Device {
	if limit > 0 {
		for i := range ds {
			ds[i].FreeBytes = min(ds[i].FreeBytes, limit)
		}
	}
	return ds
}
