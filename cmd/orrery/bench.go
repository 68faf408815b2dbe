package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// orrery bench measures a running cluster through its API (see package
// bench): for each placement of a model, prefill and decode speed, time to
// first token, peak memory per node and energy, with the trace of every
// run.

const benchUsage = `usage: orrery bench --model M [flags]

Places the model on each placement in turn (deleting its other instances
first), runs warmup and measured requests for every pp × tg × concurrency,
and prints a summary table; --json-out writes every run, a cluster snapshot
and per-node system metrics.

`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o bench.Options
	var api, jsonOut string
	fs := flag.NewFlagSet("orrery bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	fs.StringVar(&api, "api", "http://127.0.0.1:52416", "a node's API URL")
	fs.StringVar(&o.Model, "model", "", "the model id (as in /v1/models)")
	pp := fs.String("pp", "128", "prompt lengths in tokens, comma-separated")
	tg := fs.String("tg", "64", "tokens to generate, comma-separated (paired with --pp when the lists are as long, else every combination)")
	fs.BoolVar(&o.Cartesian, "cartesian", false, "every pp × tg combination even when the lists are as long")
	conc := fs.String("concurrency", "1", "concurrent requests per run, comma-separated")
	fs.IntVar(&o.Warmup, "warmup", 1, "unmeasured runs before each pp/tg/concurrency")
	fs.IntVar(&o.Repeat, "repeat", 3, "measured runs of each pp/tg/concurrency")
	placements := fs.String("placements", "", `node counts (1,2,3) or node sets (ID+ID,ID; ids or prefixes), each a pipeline, or prefixed "tensor:" (one tensor-parallel group) or "auto:" (the plan the cost model picks); default: every count that fits, as pipelines`)
	gpu := optionalGPULayersFlag(fs, "blocks of each rank on its node's GPU in every placement: auto, 0 or a number (default: each node's own --gpu-layers)")
	fs.StringVar(&jsonOut, "json-out", "", "write runs, cluster snapshot and system metrics as JSON to this file")
	fs.BoolVar(&o.NoSystemMetrics, "no-system-metrics", false, "do not sample GPU, temperature and power (energy is then null)")
	fs.DurationVar(&o.MetricsInterval, "metrics-interval", time.Second, "system metrics sampling period")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "limit for one request, and for loading one placement")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	var err error
	for _, l := range []struct {
		name, s string
		dst     *[]int
	}{{"pp", *pp, &o.PP}, {"tg", *tg, &o.TG}, {"concurrency", *conc, &o.Conc}} {
		if *l.dst, err = bench.ParseIntList(l.name, l.s); err != nil {
			fmt.Fprintf(stderr, "orrery bench: %v\n", err)
			return 2
		}
	}
	o.GPULayers = gpu.value()
	if o.Placements, err = bench.ParsePlacements(*placements); err != nil {
		fmt.Fprintf(stderr, "orrery bench: %v\n", err)
		return 2
	}
	switch {
	case o.Model == "":
		fmt.Fprintln(stderr, "orrery bench: --model is required (see GET /v1/models)")
		return 2
	case o.Warmup < 0 || o.Repeat < 1:
		fmt.Fprintln(stderr, "orrery bench: want --warmup ≥ 0 and --repeat ≥ 1")
		return 2
	case o.MetricsInterval < 100*time.Millisecond:
		fmt.Fprintln(stderr, "orrery bench: --metrics-interval must be ≥ 100ms")
		return 2
	}
	o.Progress, o.TTY = stderr, isTerminal(stderr)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := bench.Cluster(ctx, apiClient(strings.TrimRight(api, "/"), 0), o)
	if out != nil && len(out.Runs) > 0 {
		bench.PrintTable(stdout, out)
		if jsonOut != "" {
			if werr := writeJSONFile(jsonOut, out); werr != nil {
				fmt.Fprintf(stderr, "orrery bench: %v\n", werr)
				return 1
			}
			fmt.Fprintf(stderr, "orrery bench: wrote %s\n", jsonOut)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery bench: %v\n", err)
		return 1
	}
	return 0
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// writeJSONFile writes v as indented JSON, atomically (temp + rename).
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}
