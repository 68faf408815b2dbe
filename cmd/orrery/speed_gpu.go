package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// gpuChildTimeout bounds one GPU's measurement (lavapipe here: about
// 15 s, most of it compiling pipelines the first time).
const gpuChildTimeout = 3 * time.Minute

// measureGPUChild measures device d in a child process (`orrery speed
// --gpu-device ID --json`): a process measures one device, since loading
// GPU models one after another in one process corrupted lavapipe's heap,
// and a driver that faults takes only the child down. A failure is kept
// in the figures' Error, with the device, so that the node still lists it.
// A child killed by a signal is tried once more: lavapipe aborted on a
// corrupted heap in 2 of 11 runs here, both times in its first seconds.
func measureGPUChild(ctx context.Context, exe string, cfg speedConfig, d runnerapi.Device) runnerapi.GPUSpeed {
	g, crashed := measureGPUChildOnce(ctx, exe, cfg, d)
	if crashed && ctx.Err() == nil {
		again, _ := measureGPUChildOnce(ctx, exe, cfg, d)
		if again.Error != "" {
			again.Error += " (and before that, " + g.Error + ")"
		}
		return again
	}
	return g
}

// measureGPUChildOnce is one child of measureGPUChild; crashed says that
// it died of a signal, not of its timeout.
func measureGPUChildOnce(ctx context.Context, exe string, cfg speedConfig, d runnerapi.Device) (_ runnerapi.GPUSpeed, crashed bool) {
	ctx, cancel := context.WithTimeout(ctx, gpuChildTimeout)
	defer cancel()
	args := []string{"speed", "--json", "--gpu-device", d.ID, "--threads", strconv.Itoa(cfg.threads), "--dir", cfg.dir}
	if cfg.software {
		args = append(args, "--gpu-software")
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, exe, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	failed := func(err error) runnerapi.GPUSpeed {
		return runnerapi.GPUSpeed{Device: d, Error: err.Error(), Seconds: time.Since(start).Seconds()}
	}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		signaled := errors.As(err, &exit) && exit.ProcessState != nil && !exit.Exited() && ctx.Err() == nil
		return failed(fmt.Errorf("%w: %s", err, lastLine(errb.String()))), signaled
	}
	var g runnerapi.GPUSpeed
	if err := json.Unmarshal(out.Bytes(), &g); err != nil {
		return failed(fmt.Errorf("the GPU speed child printed %q: %w", lastLine(out.String()), err)), false
	}
	if g.Device.ID != d.ID || g.Device.Library != d.Library {
		return failed(fmt.Errorf("the GPU speed child measured %s, not %s", g.Device, d)), false
	}
	return g, false
}

// speedGPUChild is `orrery speed --gpu-device ID`: it measures that one
// device and prints its figures as JSON.
func speedGPUChild(ctx context.Context, dir string, threads int, id string, software bool, stdout, stderr io.Writer) int {
	ds, err := listGPUs(dir, software)
	if err != nil {
		fmt.Fprintf(stderr, "orrery speed: %v\n", err)
		return 1
	}
	for _, d := range ds {
		if d.ID != id {
			continue
		}
		g, err := measureGPU(ctx, dir, threads, d, software)
		if err != nil {
			fmt.Fprintf(stderr, "orrery speed: GPU %s: %v\n", d, err)
			return 1
		}
		json.NewEncoder(stdout).Encode(g)
		return 0
	}
	fmt.Fprintf(stderr, "orrery speed: no GPU %q among the %d ggml lists\n", id, len(ds))
	return 1
}

func printGPUSpeed(w io.Writer, g runnerapi.GPUSpeed) {
	d := g.Device
	fmt.Fprintf(w, "\nGPU %s, %s: %.2f GiB, %.2f GiB free", d, d.Library, float64(d.TotalBytes)/(1<<30), float64(d.FreeBytes)/(1<<30))
	if d.Unified {
		fmt.Fprint(w, ", unified memory")
	}
	if d.Software {
		fmt.Fprint(w, ", software")
	}
	fmt.Fprintf(w, "; measured in %.1f s\n", g.Seconds)
	if g.Error != "" {
		fmt.Fprintf(w, "not measured: %s\n", g.Error)
		return
	}
	fmt.Fprintf(w, "memory: %.1f GB/s (one-row product over a 256 MiB F32 matrix on the device)\n", g.MemBytesPerSec/1e9)
	printTypes(w, g.Types)
	fmt.Fprintf(w, "streaming from memory: %.2f× a kernel's in-cache speed (Q8_0)\n", g.StreamRatio)
	fmt.Fprintf(w, "a decode pass beyond its products: %.0f µs per block, %.0f µs per pass\n", g.LayerMicros, g.TokenMicros)
	fmt.Fprintf(w, "a trip through the host (a tensor-parallel sum from a GPU block): %.0f µs\n", g.CrossMicros)
}

// lastLine is s's last non-empty line, at most 300 bytes.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// listGPUsCommand is `orrery speed --list-gpus`: the GPUs ggml sees and
// their memory now, one a line or as JSON.
func listGPUsCommand(dir string, software, asJSON bool, stdout, stderr io.Writer) int {
	ds, err := listGPUs(dir, software)
	if err != nil {
		fmt.Fprintf(stderr, "orrery speed: %v\n", err)
		return 1
	}
	if asJSON {
		if ds == nil {
			ds = []runnerapi.Device{}
		}
		json.NewEncoder(stdout).Encode(ds)
		return 0
	}
	if len(ds) == 0 {
		fmt.Fprintln(stdout, "no GPU")
	}
	for _, d := range ds {
		fmt.Fprintf(stdout, "%s  %s  %.2f of %.2f GiB free\n", d, d.Library, float64(d.FreeBytes)/(1<<30), float64(d.TotalBytes)/(1<<30))
	}
	return 0
}
