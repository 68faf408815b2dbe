package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

const engineBenchUsage = `Usage: orrery engine-bench --model PATH [flags]

Loads a GGUF model in this process (weights read into memory) and times,
like llama-bench: prefill of a --pp-token prompt in one batch (tok/s, and
the time to the first token) and decode of --tg tokens one at a time from
an empty context (tok/s), --repeat times each, with tracing off and on. It
also measures this machine's memory read bandwidth and the decode bound it
sets (bandwidth / weight bytes).

With --vs-llama-bench it also runs llama.cpp's llama-bench on the same file
with the same prompt, decode length, threads, repetitions and attention
setting (weights read into memory, not mapped), once before and once after
Orrery's runs so that drift on a shared machine hits both alike, and prints
both side by side with Orrery's ratio. The default llama-bench is the one
scripts/llama-ref.sh builds.

Flags:
`

func runEngineBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery engine-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), engineBenchUsage)
		fs.PrintDefaults()
	}
	var o bench.EngineOptions
	fs.StringVar(&o.Model, "model", "", "GGUF model to load")
	fs.IntVar(&o.Threads, "threads", runtime.NumCPU(), "CPU threads")
	fs.IntVar(&o.PP, "pp", 128, "prompt tokens for the prefill test (0: skip)")
	fs.IntVar(&o.TG, "tg", 64, "tokens for the decode test (0: skip)")
	fs.IntVar(&o.Repeat, "repeat", 3, "runs of each test")
	fs.BoolVar(&o.Bandwidth, "bandwidth", true, "measure memory read bandwidth")
	fs.BoolVar(&o.NoFlashAttention, "no-flash-attn", false, "compute attention as separate ops instead of the fused flash-attention kernel")
	fs.BoolVar(&o.NoRepack, "no-repack", false, "keep Q4_0/Q4_K/IQ4_NL weights unpacked (ggml's plain kernels)")
	asJSON := fs.Bool("json", false, "print JSON")
	gpu := addGPUFlags(fs, runnerapi.GPUAuto)
	vsLlama := fs.Bool("vs-llama-bench", false, "also run llama.cpp's llama-bench on the same file and print the ratios")
	llamaBench := fs.String("llama-bench", llamaref.Bin(llamaref.Dir(), "llama-bench"), "the llama-bench binary for --vs-llama-bench")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if o.Model == "" || o.Repeat < 1 || o.PP < 0 || o.TG < 0 {
		fmt.Fprintln(stderr, "orrery engine-bench: --model is required; --repeat ≥ 1, --pp and --tg ≥ 0")
		return 2
	}
	if *vsLlama {
		o.LlamaBench = *llamaBench
	}
	var opts backend.Options
	_, w, err := gpu.setup(&opts)
	if err != nil {
		fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
		return 1
	}
	if w != "" {
		fmt.Fprintf(stderr, "orrery engine-bench: warning: %s\n", w)
	}
	o.GPULayers, o.GPUSoftware = opts.GPULayers, opts.GPUSoftware
	return runInProcess(stdout, stderr, "engine-bench", *asJSON, func() (*bench.EngineReport, error) {
		return bench.Engine(ctx, o, loadRank, stderr)
	}, bench.PrintEngine)
}

// runInProcess runs an in-process benchmark after warning of a slow
// ggml build, and prints its report as JSON or as print does.
func runInProcess[R any](stdout, stderr io.Writer, cmd string, asJSON bool, run func() (R, error), print func(io.Writer, R)) int {
	if w := engineBuildWarning(); w != "" {
		fmt.Fprintf(stderr, "orrery %s: warning: %s\n", cmd, w)
	}
	rep, err := run()
	if err != nil {
		fmt.Fprintf(stderr, "orrery %s: %v\n", cmd, err)
		return 1
	}
	if asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	print(stdout, rep)
	return 0
}
