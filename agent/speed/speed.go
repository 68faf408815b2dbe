// Package speed gets a node's compute speed for placement's cost model
// (docs/cost-model.md): by running `orrery speed` in a child process (so
// that ggml's buffers go with it), from a file it wrote, or from the copy
// an agent keeps in its data dir.
package speed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// Timeout bounds the benchmark's child process: a few seconds on the
// CPU and a real GPU, about a minute with lavapipe (which compiles each
// kernel at its first use).
const Timeout = 5 * time.Minute

// GPUs says which GPUs a node's speed measures: by default those ggml
// lists but a software one.
type GPUs struct {
	// Software measures a software device too (Mesa's lavapipe: the
	// agent's --gpu-software, which lets its runners use one); None
	// measures none (a node whose runners must not use its GPU).
	Software, None bool
}

// Measure runs `exe speed --json` on threads threads, its probe files in
// dir, measuring the GPUs gpus says, and returns the speed and the JSON it
// printed.
func Measure(ctx context.Context, exe, dir string, threads int, gpus GPUs) (runnerapi.Speed, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	args := []string{"speed", "--json", "--threads", strconv.Itoa(threads), "--dir", dir}
	if gpus.Software {
		args = append(args, "--gpu-software")
	}
	if gpus.None {
		args = append(args, "--gpus=false")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return runnerapi.Speed{}, nil, fmt.Errorf("%w: %s", err, lastLine(errb.Bytes()))
	}
	sp, err := parse(out.Bytes())
	return sp, out.Bytes(), err
}

// ReadFile reads a file of `orrery speed --json`.
func ReadFile(path string) (runnerapi.Speed, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return runnerapi.Speed{}, err
	}
	return parse(b)
}

func parse(b []byte) (runnerapi.Speed, error) {
	var sp runnerapi.Speed
	if err := json.Unmarshal(b, &sp); err != nil {
		return sp, fmt.Errorf("orrery speed printed %q: %w", lastLine(b), err)
	}
	return sp, sp.Check()
}

// Cache is an agent's copy of its speed (<data dir>/speed.json), with
// what it was measured under: another build, thread count or machine
// measures again.
type Cache struct {
	Path    string `json:"-"`
	Version string `json:"version"`
	Threads int    `json:"threads"`
	Machine string `json:"machine"`
	// GPUSoftware says a software GPU device was measured too, NoGPU
	// that no GPU was (a file from before GPUs were measured reads as
	// neither).
	GPUSoftware bool `json:"gpuSoftware,omitempty"`
	NoGPU       bool `json:"noGPU,omitempty"`
}

type cached struct {
	Cache
	Speed runnerapi.Speed `json:"speed"`
}

// Load is the speed kept at c.Path when it was measured as c says.
func (c Cache) Load() (runnerapi.Speed, bool) {
	b, err := os.ReadFile(c.Path)
	if err != nil {
		return runnerapi.Speed{}, false
	}
	var k cached
	k.Path = c.Path
	if json.Unmarshal(b, &k) != nil || k.Cache != c || k.Speed.Check() != nil {
		return runnerapi.Speed{}, false
	}
	return k.Speed, true
}

// Store keeps sp at c.Path (atomically).
func (c Cache) Store(sp runnerapi.Speed) error {
	b, err := json.MarshalIndent(cached{c, sp}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(c.Path, b, 0o600)
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

// Config says where a node's speed comes from (Get).
type Config struct {
	// Source is "auto" (the cache when it matches, else measured), a
	// file of `orrery speed --json`, or "" / "off" (none).
	Source string
	// Exe is the orrery binary; Dir the data dir (the cache, the probe's
	// files); Threads the runners' threads; Version and Machine what the
	// cache is keyed by with them.
	Exe, Dir         string
	Threads          int
	Version, Machine string
	// GPUs are the GPUs measured (and so published with the node's
	// identity, and counted by placement).
	GPUs GPUs
	// Busy reports whether this node's runners are loading or serving:
	// the benchmark waits until they are not (it would slow them, and they
	// it), and what it measured while they got busy is used but not kept.
	Busy   func() bool
	Logger *slog.Logger
}

// ErrOff is returned by Get when the speed is off.
var ErrOff = errors.New("speed off")

// idlePoll is how often Get looks again at busy runners.
const idlePoll = 5 * time.Second

// Get is the node's speed as c says.
func Get(ctx context.Context, c Config) (runnerapi.Speed, error) {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	busy := c.Busy
	if busy == nil {
		busy = func() bool { return false }
	}
	switch c.Source {
	case "", "off":
		return runnerapi.Speed{}, ErrOff
	case "auto":
	default:
		return ReadFile(c.Source)
	}
	cache := Cache{Path: filepath.Join(c.Dir, "speed.json"), Version: c.Version, Threads: c.Threads, Machine: c.Machine, GPUSoftware: c.GPUs.Software, NoGPU: c.GPUs.None}
	if sp, ok := cache.Load(); ok {
		return sp, nil
	}
	for busy() {
		select {
		case <-ctx.Done():
			return runnerapi.Speed{}, ctx.Err()
		case <-time.After(idlePoll):
		}
	}
	log.Info("measuring this node's speed for the placement cost model", "threads", c.Threads)
	sp, _, err := Measure(ctx, c.Exe, c.Dir, c.Threads, c.GPUs)
	if err != nil {
		return sp, err
	}
	if busy() {
		log.Info("a runner got busy while the speed was measured: not keeping the figures")
		return sp, nil
	}
	if err := cache.Store(sp); err != nil {
		log.Warn("keep the measured speed", "err", err)
	}
	log.Info("speed measured", "seconds", fmt.Sprintf("%.1f", sp.Seconds), "memGBps", fmt.Sprintf("%.1f", sp.MemBytesPerSec/1e9),
		"q8_0DecodeGBps", fmt.Sprintf("%.1f", sp.Types["Q8_0"].DecodeBytesPerSec/1e9))
	for _, g := range sp.GPUs {
		if g.Error != "" {
			log.Warn("GPU not measured: placement predicts its blocks at the CPU's speed", "gpu", g.Device.String(), "err", g.Error)
			continue
		}
		log.Info("GPU speed measured", "gpu", g.Device.String(), "seconds", fmt.Sprintf("%.1f", g.Seconds),
			"memGBps", fmt.Sprintf("%.1f", g.MemBytesPerSec/1e9), "crossMicros", fmt.Sprintf("%.0f", g.CrossMicros))
	}
	return sp, nil
}
