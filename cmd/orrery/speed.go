package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/hop"
)

const speedUsage = `Usage: orrery speed [flags]

Measures this machine's compute for the placement cost model (about three
seconds): each common weight type's one-row (decode) and 64-row (prefill)
matrix products on --threads threads, the memory bandwidth, the cost of a
decode pass beyond its products, a two-rank all-reduce over loopback, and
one hop between two processes (this one and a child, as a runner and its
agent). Then each GPU ggml lists (a software one, Mesa's lavapipe, only
with --gpu-software) the same way, in a child process each: its kernels,
its memory's bandwidth, a pass's overhead on it and what a trip through
the host costs a pass there. The agent runs it at start (with its
--runner-threads and --gpu-software) and keeps the result with the node's
identity; "parallelism": "auto" predicts from it. See docs/cost-model.md.

Flags:
`

func runSpeed(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery speed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), speedUsage)
		fs.PrintDefaults()
	}
	threads := fs.Int("threads", runtime.NumCPU(), "CPU threads, as the runners use")
	dir := fs.String("dir", os.TempDir(), "where the probe's file is written while it runs (about 40 MB)")
	asJSON := fs.Bool("json", false, "print JSON")
	software := fs.Bool("gpu-software", false, "measure a software GPU device too (Mesa's lavapipe), as runners with --gpu-software use it")
	gpus := fs.Bool("gpus", true, "measure the GPUs ggml lists (false: the CPU only)")
	echo := fs.Bool("echo-serve", false, "internal: echo on a loopback port (printed) for the cross-process hop, until stdin closes")
	device := fs.String("gpu-device", "", "internal: measure only the GPU of this id (in a process of its own) and print its figures as JSON")
	list := fs.Bool("list-gpus", false, "only list the GPUs ggml sees, with their memory now (a software one with --gpu-software), and exit")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *echo {
		if err := hop.Serve(os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "orrery speed: echo: %v\n", err)
			return 1
		}
		return 0
	}
	if *threads < 1 {
		fmt.Fprintln(stderr, "orrery speed: --threads must be at least 1")
		return 2
	}
	if *device != "" {
		return speedGPUChild(ctx, *dir, *threads, *device, *software, stdout, stderr)
	}
	if *list {
		return listGPUsCommand(*dir, *software, *asJSON, stdout, stderr)
	}
	sp, err := measureSpeed(ctx, speedConfig{dir: *dir, threads: *threads, software: *software, gpus: *gpus, warn: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "orrery speed: %v\n", err)
		return 1
	}
	if *asJSON {
		json.NewEncoder(stdout).Encode(sp)
		return 0
	}
	printSpeed(stdout, sp)
	return 0
}

// speedConfig is what `orrery speed` measures.
type speedConfig struct {
	dir      string
	threads  int
	software bool      // a software GPU device (lavapipe) too
	gpus     bool      // the GPUs at all
	warn     io.Writer // what could not be measured, when not nil
}

// measureSpeed is the whole benchmark: compute, then the loopback
// collective, then each GPU's in a child.
func measureSpeed(ctx context.Context, cfg speedConfig) (runnerapi.Speed, error) {
	start := time.Now()
	dir, threads := cfg.dir, cfg.threads
	var devices []runnerapi.Device
	if cfg.gpus {
		// Before the process's first backend: ollama loads the GPU
		// backends once. Without them the CPU is still measured.
		ds, err := listGPUs(dir, cfg.software)
		if err != nil && cfg.warn != nil {
			fmt.Fprintf(cfg.warn, "orrery speed: no GPU measured: %v\n", err)
		}
		devices = ds
	}
	sp, err := measureCompute(ctx, dir, threads)
	if err != nil {
		return sp, err
	}
	reduce, err := collective.MeasureLoopback(ctx, 2048, 400)
	if err != nil {
		return sp, fmt.Errorf("loopback all-reduce: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return sp, err
	}
	// A hop between two processes (a runner and its agent), measured
	// against a child of this command: it inherits this process's CPU
	// affinity, so a node that shares cores pays what its runners will.
	h, err := hop.Measure(ctx, exe, []string{"speed", "--echo-serve"}, 8<<10, 400)
	if err != nil {
		return sp, fmt.Errorf("cross-process hop: %w", err)
	}
	sp.ReduceMicros, sp.HopMicros = float64(reduce.Nanoseconds())/1e3, float64(h.Nanoseconds())/1e3
	for _, d := range devices {
		if d.Software && !cfg.software {
			continue
		}
		sp.GPUs = append(sp.GPUs, measureGPUChild(ctx, exe, cfg, d))
	}
	sp.Version = version
	sp.Seconds = time.Since(start).Seconds()
	return sp, nil
}

func printSpeed(w io.Writer, sp runnerapi.Speed) {
	fmt.Fprintf(w, "%d threads, measured in %.1f s\n", sp.Threads, sp.Seconds)
	fmt.Fprintf(w, "memory: %.1f GB/s (one-row product over a 256 MiB F32 matrix)\n", sp.MemBytesPerSec/1e9)
	printTypes(w, sp.Types)
	fmt.Fprintf(w, "streaming from memory: %.2f× a kernel's in-cache speed (Q8_0)\n", sp.StreamRatio)
	fmt.Fprintf(w, "a decode pass beyond its products: %.0f µs per block, %.0f µs per pass\n", sp.LayerMicros, sp.TokenMicros)
	fmt.Fprintf(w, "loopback all-reduce of 2048 f32: %.0f µs; one hop between two processes (8 KiB): %.0f µs\n", sp.ReduceMicros, sp.HopMicros)
	for _, g := range sp.GPUs {
		printGPUSpeed(w, g)
	}
}

// printTypes prints each type's kernels, most bits first.
func printTypes(w io.Writer, types map[string]runnerapi.TypeSpeed) {
	fmt.Fprintf(w, "%-6s %6s %14s %16s\n", "type", "bits", "decode GB/s", "prefill GFLOP/s")
	fmt.Fprintf(w, "(decode: a one-row product in the caches; prefill: 64 rows)\n")
	names := make([]string, 0, len(types))
	for n := range types {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(types[b].BitsPerWeight, types[a].BitsPerWeight); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, n := range names {
		t := types[n]
		fmt.Fprintf(w, "%-6s %6.2f %14.1f %16.1f\n", n, t.BitsPerWeight, t.DecodeBytesPerSec/1e9, t.PrefillFlopsPerSec/1e9)
	}
}
