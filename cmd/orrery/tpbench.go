package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/split"
)

const tpBenchUsage = `Usage: orrery tp-bench --model PATH [flags]

Times one request on one runner against a tensor-parallel group of --tp
runners, side by side: prefill of a --pp-token prompt and decode of --tg
tokens, --repeat rounds (after one warmup), --concurrent decodes at once
(the aggregate tok/s of continuous batching), and the all-reduce of one
decode row between the group's processes, as the runners link (loopback
TCP). Both sides stay loaded and each round runs on one then the other, so
that the machine's drift falls on both alike; each round's decode speed-up
is printed. It writes the model's slices into --dir first (once).

With --cores (the default on a machine with enough cores), each runner and
the single one run on one thread, pinned to its own core with taskset: on
one machine this stands in for --tp machines, and says so. Each round then
also runs a runner of the whole model on every one of those cores at once
(the single runner and its twins) and prints the cores' ceiling: --tp
times the slowest one's speed over the single runner's alone, the speed-up
a group could reach were its communication free, since cores of one
machine slow each other when all compute (machines do not); and how much
of it the group reached.

With --choice DELAYS, it then starts two agents (each pinned to its own
core, its runners on one thread) that reach each other only through delay
proxies adding each delay each way, lets each measure its speed, places the
model with "parallelism": "auto" over both, and measures both plans (a
pipeline of 2 and a tensor-parallel group of 2) beside the cost model's
predictions. The group links directly, as agents do by default: behind the
proxies its direct links go through proxies of their own (each agent's
--direct-ports, each proxied at the address the other agent reaches it at);
a delay of 0 means no proxy.

Flags:
`

func runTPBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery tp-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), tpBenchUsage)
		fs.PrintDefaults()
	}
	var o bench.TPOptions
	fs.StringVar(&o.Model, "model", "", "GGUF model (a whole model: dense, or a mixture of experts, split by experts)")
	fs.IntVar(&o.Ranks, "tp", 2, "tensor-parallel ranks")
	cores := fs.String("cores", "auto", `cores to pin the runners to, comma-separated ("auto": 0..tp-1 when the machine has them; "none": no pinning)`)
	fs.IntVar(&o.PP, "pp", 128, "prompt tokens for the prefill test (0: skip)")
	fs.IntVar(&o.TG, "tg", 64, "tokens for the decode test (0: skip)")
	fs.IntVar(&o.Repeat, "repeat", 5, "rounds of the tests, each on one runner then on the group")
	fs.StringVar(&o.Dir, "dir", filepath.Join(os.TempDir(), "orrery-tp-slices"), "where the slices are written (kept for later runs)")
	fs.IntVar(&o.ReduceIters, "reduce-iters", 2000, "all-reduces to time")
	fs.IntVar(&o.Concurrent, "concurrent", 4, "requests decoded at once in the batched test (0 or 1: skip it)")
	experts := fs.String("experts", "auto", `how a mixture of experts splits: "whole" (each rank a range of experts), "columns" (each rank every expert's range of columns) or "auto" (columns where they divide evenly)`)
	wire := fs.String("wire", "f32", "the group's all-reduce wire type: f32, f16 or bf16 (the runners' --tp-wire)")
	asJSON := fs.Bool("json", false, "print JSON")
	choice := fs.String("choice", "", `also run "parallelism": "auto" on two agents that reach each other through delay proxies adding these delays each way (e.g. 1ms,50us; 0: no proxy), the group's direct links too, and measure both plans against their predictions (each agent pinned to its own core, as the runners)`)
	choiceOnly := fs.Bool("choice-only", false, "run only the --choice part")
	choiceTG := fs.Int("choice-tg", 64, "tokens decoded per request in the --choice part")
	// The all-reduce's ranks are this command again, with these flags.
	worker := fs.Int("reduce-worker", -1, "internal: run as rank N of the all-reduce timing")
	workerAddrs := fs.String("reduce-addrs", "", "internal: the all-reduce ranks' loopback addresses")
	workerValues := fs.Int("reduce-values", 2048, "internal: f32 values per all-reduce")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *worker >= 0 {
		addrs := strings.Split(*workerAddrs, ",")
		if *worker >= len(addrs) {
			fmt.Fprintf(stderr, "orrery tp-bench: --reduce-worker %d of %d addresses\n", *worker, len(addrs))
			return 2
		}
		if err := bench.ReduceWorker(ctx, *worker, addrs, os.Getenv(runnerapi.GroupTokenEnv), *workerValues, o.ReduceIters, stdout); err != nil {
			fmt.Fprintf(stderr, "orrery tp-bench: all-reduce rank %d: %v\n", *worker, err)
			return 1
		}
		return 0
	}
	if o.Model == "" || o.Ranks < 2 || o.Repeat < 1 || o.PP < 0 || o.TG < 0 || o.ReduceIters < 10 {
		fmt.Fprintln(stderr, "orrery tp-bench: --model is required; --tp ≥ 2, --repeat ≥ 1, --pp and --tg ≥ 0, --reduce-iters ≥ 10")
		return 2
	}
	err := splitFlags(&o, *experts, *wire)
	if err != nil {
		fmt.Fprintf(stderr, "orrery tp-bench: %v\n", err)
		return 2
	}
	if o.Cores, err = parseCores(*cores, o.Ranks); err != nil {
		fmt.Fprintf(stderr, "orrery tp-bench: --cores: %v\n", err)
		return 2
	}
	if o.Bin, err = os.Executable(); err != nil {
		fmt.Fprintf(stderr, "orrery tp-bench: %v\n", err)
		return 1
	}
	var delays []time.Duration
	for _, f := range strings.Split(*choice, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 || d > time.Second {
			fmt.Fprintf(stderr, "orrery tp-bench: --choice %q: want delays such as 1ms,50us (0..1s)\n", f)
			return 2
		}
		delays = append(delays, d)
	}
	if *choiceOnly && len(delays) == 0 {
		fmt.Fprintln(stderr, "orrery tp-bench: --choice-only needs --choice")
		return 2
	}
	return runInProcess(stdout, stderr, "tp-bench", *asJSON, func() (*bench.TPReport, error) {
		rep := &bench.TPReport{Model: o.Model, Ranks: o.Ranks, Cores: o.Cores}
		if !*choiceOnly {
			if rep, err = bench.TP(ctx, o, stderr); err != nil {
				return rep, err
			}
		}
		if len(delays) > 0 {
			var cores []int
			if o.Cores != nil {
				cores = o.Cores[:2]
			}
			rep.Choice, err = bench.Choice(ctx, bench.ChoiceOptions{Model: o.Model, Bin: o.Bin, Delays: delays, Cores: cores,
				PP: 32, TG: *choiceTG, Repeat: o.Repeat, Dir: o.Dir, Timeout: 10 * time.Minute}, stderr)
		}
		return rep, err
	}, bench.PrintTP)
}

// splitFlags reads --experts and --wire into o.
func splitFlags(o *bench.TPOptions, experts, wire string) error {
	switch experts {
	case "auto":
	case "whole", "columns":
		o.Experts = split.ExpertSplit(experts)
	default:
		return fmt.Errorf("--experts %q: want auto, whole or columns", experts)
	}
	var err error
	if o.Wire, err = collective.ParseWire(wire); err != nil {
		return fmt.Errorf("--wire: %w", err)
	}
	return nil
}

// parseCores reads --cores for ranks runners: nil for no pinning.
func parseCores(s string, ranks int) ([]int, error) {
	switch s {
	case "none":
		return nil, nil
	case "auto":
		n := runtime.NumCPU()
		if n < ranks {
			return nil, nil
		}
		out := make([]int, ranks)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 0 {
			return nil, fmt.Errorf("%q is not a core number", f)
		}
		out = append(out, c)
	}
	if len(out) < ranks {
		return nil, fmt.Errorf("%d cores for %d ranks", len(out), ranks)
	}
	return out, nil
}
