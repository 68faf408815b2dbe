package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// speedFile caches the node's measured speed in its data dir, with what
// it was measured under: a different build, thread count or machine
// measures again.
const speedFile = "speed.json"

type speedCache struct {
	Version string        `json:"version"`
	Threads int           `json:"threads"`
	Machine string        `json:"machine"`
	Speed   backend.Speed `json:"speed"`
}

// speedTimeout bounds the benchmark's child process; speedIdlePoll is how
// often a node with busy runners looks again.
const (
	speedTimeout  = 2 * time.Minute
	speedIdlePoll = 5 * time.Second
)

// runnersBusy reports whether a runner of this node is loading or serving.
func (a *Agent) runnersBusy() bool {
	for _, r := range a.store.State().Runners {
		if r.NodeID == a.identity.NodeID && (r.Status == state.RunnerLoading || r.Status == state.RunnerRunning) {
			return true
		}
	}
	return false
}

// measureSpeed finds this node's compute speed for placement's cost model
// (Config.Speed): read from a file, from the cache when it matches, or
// measured by `orrery speed` in a child process (so that ggml's buffers
// go with it), then published with the node's identity.
func (a *Agent) measureSpeed(ctx context.Context, exe string) {
	var sp backend.Speed
	switch a.cfg.Speed {
	case "", "off":
		return
	case "auto":
		s, err := a.cachedOrMeasured(ctx, exe)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("speed benchmark failed: placement cannot predict plans from this node's speed", "err", err)
			}
			return
		}
		sp = s
	default:
		b, err := os.ReadFile(a.cfg.Speed)
		if err == nil {
			err = json.Unmarshal(b, &sp)
		}
		if err == nil {
			err = sp.Check()
		}
		if err != nil {
			a.log.Warn("speed file unusable", "path", a.cfg.Speed, "err", err)
			return
		}
	}
	a.idMu.Lock()
	a.identity.Speed = &sp
	a.idMu.Unlock()
	a.publishIdentity()
}

func (a *Agent) speedThreads() int {
	if a.cfg.RunnerThreads > 0 {
		return a.cfg.RunnerThreads
	}
	return runtime.NumCPU()
}

func (a *Agent) cachedOrMeasured(ctx context.Context, exe string) (backend.Speed, error) {
	path := filepath.Join(a.cfg.DataDir, speedFile)
	key := speedCache{Version: a.cfg.Version, Threads: a.speedThreads(),
		Machine: fmt.Sprintf("%s/%s/%d cpus/%s", a.identity.ChipID, a.identity.ModelID, a.identity.CPUCount, runtime.GOARCH)}
	if b, err := os.ReadFile(path); err == nil {
		var c speedCache
		if json.Unmarshal(b, &c) == nil && c.Version == key.Version && c.Threads == key.Threads && c.Machine == key.Machine && c.Speed.Check() == nil {
			return c.Speed, nil
		}
	}
	// Measured while this node's runners are idle: a loading or busy one
	// would share the cores with the benchmark (and be slowed by it).
	for a.runnersBusy() {
		select {
		case <-ctx.Done():
			return backend.Speed{}, ctx.Err()
		case <-time.After(speedIdlePoll):
		}
	}
	ctx, cancel := context.WithTimeout(ctx, speedTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "speed", "--json", "--threads", strconv.Itoa(key.Threads), "--dir", a.cfg.DataDir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	a.log.Info("measuring this node's speed for the placement cost model", "threads", key.Threads)
	if err := cmd.Run(); err != nil {
		return backend.Speed{}, fmt.Errorf("%w: %s", err, lastLine(errb.Bytes()))
	}
	var sp backend.Speed
	if err := json.Unmarshal(out.Bytes(), &sp); err != nil {
		return sp, fmt.Errorf("orrery speed printed %q: %w", lastLine(out.Bytes()), err)
	}
	if err := sp.Check(); err != nil {
		return sp, err
	}
	key.Speed = sp
	if a.runnersBusy() {
		// Perturbed: used, but measured again at the next start.
		a.log.Info("a runner got busy while the speed was measured: not keeping the figures")
		return sp, nil
	}
	if b, err := json.MarshalIndent(key, "", "  "); err == nil {
		if err := atomicfile.Write(path, b, 0o600); err != nil {
			a.log.Warn("keep the measured speed", "err", err)
		}
	}
	a.log.Info("speed measured", "seconds", fmt.Sprintf("%.1f", sp.Seconds), "memGBps", fmt.Sprintf("%.1f", sp.MemBytesPerSec/1e9),
		"q8_0DecodeGBps", fmt.Sprintf("%.1f", sp.Types["Q8_0"].DecodeBytesPerSec/1e9))
	return sp, nil
}

func lastLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}
