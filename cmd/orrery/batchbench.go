package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

const batchBenchUsage = `Usage: orrery batch-bench --model PATH [flags]

Loads a GGUF model in this process with as many slots as the largest
--concurrency and serves B requests at once through the runner's scheduler
(continuous batching: one decode row per request per step), for each B:
aggregate prefill tok/s (B·pp tokens until every request has its first
token) and aggregate decode tok/s (B·tg tokens from then to the last), the
mean of --repeat runs after a warmup. Each request has its own prompt and
the prefix cache is off for these runs.

With --turn N it then times a conversation: a first turn of N prompt
tokens from an empty cache, and a second turn (the first, its answer and
--turn-add new tokens), whose prefix the cache serves; it prints both times
to first token and their ratio.

With --vs-llama-batched-bench it also runs llama.cpp's llama-batched-bench
on the same file with the same shapes (-npp, -ntg, -npl, threads, flash
attention), once before and once after Orrery's runs so that drift on a
shared machine hits both alike, and prints the means of its S_PP and S_TG
beside Orrery's.

Flags:
`

func runBatchBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery batch-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), batchBenchUsage)
		fs.PrintDefaults()
	}
	var o bench.BatchedOptions
	fs.StringVar(&o.Model, "model", "", "GGUF model to load")
	fs.IntVar(&o.Threads, "threads", runtime.NumCPU(), "CPU threads")
	fs.IntVar(&o.PP, "pp", 128, "prompt tokens of each request")
	fs.IntVar(&o.TG, "tg", 32, "tokens each request decodes after its first")
	conc := fs.String("concurrency", "1,2,4,8", "requests at once, comma-separated")
	fs.IntVar(&o.Repeat, "repeat", 2, "measured runs of each concurrency")
	fs.IntVar(&o.Turn, "turn", 0, "prompt tokens of a conversation's first turn, to time the second's cached prefill (0: skip)")
	fs.IntVar(&o.TurnAdd, "turn-add", 50, "new prompt tokens of the second turn")
	asJSON := fs.Bool("json", false, "print JSON")
	gpu := addGPUFlags(fs, runnerapi.GPUAuto)
	vsLlama := fs.Bool("vs-llama-batched-bench", false, "also run llama.cpp's llama-batched-bench on the same file")
	llamaBin := fs.String("llama-batched-bench", llamaref.Bin(llamaref.Dir(), "llama-batched-bench"), "the llama-batched-bench binary")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	var err error
	if o.Conc, err = bench.ParseIntList("concurrency", *conc); err != nil {
		fmt.Fprintf(stderr, "orrery batch-bench: %v\n", err)
		return 2
	}
	if o.Model == "" || o.Repeat < 1 || o.PP < 1 || o.TG < 1 || o.Turn < 0 || o.TurnAdd < 1 {
		fmt.Fprintln(stderr, "orrery batch-bench: --model is required; --repeat, --pp, --tg and --turn-add ≥ 1, --turn ≥ 0")
		return 2
	}
	for _, b := range o.Conc {
		if b < 1 || b > 64 {
			fmt.Fprintf(stderr, "orrery batch-bench: concurrency %d: want 1..64\n", b)
			return 2
		}
	}
	if *vsLlama {
		o.LlamaBatchedBench = *llamaBin
	}
	var opts backend.Options
	_, w, err := gpu.setup(&opts)
	if err != nil {
		fmt.Fprintf(stderr, "orrery batch-bench: %v\n", err)
		return 1
	}
	if w != "" {
		fmt.Fprintf(stderr, "orrery batch-bench: warning: %s\n", w)
	}
	o.GPULayers, o.GPUSoftware = opts.GPULayers, opts.GPUSoftware
	return runInProcess(stdout, stderr, "batch-bench", *asJSON, func() (*bench.BatchedReport, error) {
		return bench.Batched(ctx, o, loadRank, stderr)
	}, bench.PrintBatched)
}
