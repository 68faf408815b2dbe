package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
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
agent). The agent runs it at start (with its --runner-threads) and keeps
the result with the node's identity; "parallelism": "auto" predicts from
it. See docs/cost-model.md.

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
	echo := fs.Bool("echo-serve", false, "internal: echo on a loopback port (printed) for the cross-process hop, until stdin closes")
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
	sp, err := measureSpeed(ctx, *dir, *threads)
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

// measureSpeed is the whole benchmark: compute, then the loopback
// collective.
func measureSpeed(ctx context.Context, dir string, threads int) (runnerapi.Speed, error) {
	start := time.Now()
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
	sp.Version = version
	sp.Seconds = time.Since(start).Seconds()
	return sp, nil
}

func printSpeed(w io.Writer, sp runnerapi.Speed) {
	fmt.Fprintf(w, "%d threads, measured in %.1f s\n", sp.Threads, sp.Seconds)
	fmt.Fprintf(w, "memory: %.1f GB/s (one-row product over a 256 MiB F32 matrix)\n", sp.MemBytesPerSec/1e9)
	fmt.Fprintf(w, "%-6s %6s %14s %16s\n", "type", "bits", "decode GB/s", "prefill GFLOP/s")
	fmt.Fprintf(w, "(decode: a one-row product in the caches; prefill: 64 rows)\n")
	names := make([]string, 0, len(sp.Types))
	for n := range sp.Types {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		x, y := sp.Types[a].BitsPerWeight, sp.Types[b].BitsPerWeight
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	})
	for _, n := range names {
		t := sp.Types[n]
		fmt.Fprintf(w, "%-6s %6.2f %14.1f %16.1f\n", n, t.BitsPerWeight, t.DecodeBytesPerSec/1e9, t.PrefillFlopsPerSec/1e9)
	}
	fmt.Fprintf(w, "streaming from memory: %.2f× a kernel's in-cache speed (Q8_0)\n", sp.StreamRatio)
	fmt.Fprintf(w, "a decode pass beyond its products: %.0f µs per block, %.0f µs per pass\n", sp.LayerMicros, sp.TokenMicros)
	fmt.Fprintf(w, "loopback all-reduce of 2048 f32: %.0f µs; one hop between two processes (8 KiB): %.0f µs\n", sp.ReduceMicros, sp.HopMicros)
}
