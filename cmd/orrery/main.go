// Command orrery is the headless Orrery CLI: the node agent and its tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/orrery-cluster/orrery/agent"
	"github.com/orrery-cluster/orrery/agent/api/client"
)

// version is set at link time (-ldflags "-X main.version=…") by the Makefile.
var version = "dev"

const usage = `orrery: run and observe an LLM split across several machines.

Usage:
  orrery agent [flags]        run this node's agent (local API, samplers, cluster)
  orrery demo [flags]         start a cluster of agents on this machine and print their API URLs
  orrery doctor [--api URL]   ask a running agent about its cluster and discovery problems
  orrery ring-bench [flags]   time a payload around the cluster, hop by hop
  orrery bench --model M      benchmark a running cluster: tok/s, TTFT, memory, energy per placement
  orrery trace SUB [flags]    the agent's traces: ls, stats ID, export ID -o FILE, open ID (Perfetto)
  orrery models ls|rm [flags] list the GGUF models on this machine, or delete one through the agent
  orrery run MODEL [PROMPT]   chat with a model in the terminal (or answer PROMPT once), as ollama run
  orrery pull REF             pull a model (hf.co/ORG/REPO[:QUANT], or NAME[:TAG] from the Ollama registry) through a running agent
  orrery tokenize --model ID TEXT  print the token ids and pieces of TEXT (- for stdin) via a running agent
  orrery gen-model [flags]    write a random-weight GGUF model (gibberish output; for tests and demos)
  orrery convert IN OUT       write trained weights (safetensors from models/kjv/train.py) as a GGUF model
  orrery engine-bench [flags] time prefill and decode of a model on this machine, in process
  orrery logits [flags]      print a model's greedy tokens and their logits as JSON, in process
  orrery perplexity [flags]   score a text file's perplexity with a model, in process, as llama-perplexity
  orrery batch-bench [flags]  time requests served at once (continuous batching) and a cached second turn, in process
  orrery tp-bench [flags]     time one runner against a tensor-parallel group of runners on this machine
  orrery speed [flags]        measure this machine's compute for the placement cost model
  orrery runner [flags]       the model runner child process (started by the agent)
  orrery key show             print this machine's cluster key (creating one if none)
  orrery key set KEY|-        use the cluster key from another machine
  orrery key fingerprint      print the key's public fingerprint
  orrery key invite           print a token that joins another machine to this cluster
  orrery join TOKEN           join this machine to a cluster with a token from orrery key invite
  orrery version              print the version

Run "orrery agent -h" (or demo -h, doctor -h, ring-bench -h, bench -h, tokenize -h, pull -h) for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "agent":
		return runAgent(args[1:], stderr)
	case "demo":
		return runDemoCmd(args[1:], stdout, stderr)
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "ring-bench":
		return runRingBench(context.Background(), args[1:], stdout, stderr)
	case "bench":
		return runBench(context.Background(), args[1:], stdout, stderr)
	case "trace":
		return runTrace(context.Background(), args[1:], stdout, stderr)
	case "models":
		return runModels(context.Background(), args[1:], stdout, stderr)
	case "tokenize":
		return runTokenize(context.Background(), args[1:], os.Stdin, stdout, stderr)
	case "pull":
		// Ctrl-C cancels the pull on the agent (its part stays for a resume).
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runPull(ctx, args[1:], stdout, stderr)
	case "gen-model":
		return runGenModel(args[1:], stdout, stderr)
	case "convert":
		return runConvert(args[1:], stdout, stderr)
	case "engine-bench":
		return runEngineBench(context.Background(), args[1:], stdout, stderr)
	case "logits":
		return runLogits(context.Background(), args[1:], stdout, stderr)
	case "perplexity":
		return runPerplexity(context.Background(), args[1:], stdout, stderr)
	case "batch-bench":
		return runBatchBench(context.Background(), args[1:], stdout, stderr)
	case "tp-bench":
		return runTPBench(context.Background(), args[1:], stdout, stderr)
	case "speed":
		return runSpeed(context.Background(), args[1:], stdout, stderr)
	case "runner":
		return runRunner(args[1:], os.Stdin, stdout, stderr, os.Getenv)
	case "key":
		return runKey(args[1:], os.Stdin, stdout, stderr, os.Getenv)
	case "run":
		return runRun(context.Background(), args[1:], os.Stdin, stdout, stderr)
	case "join":
		return runJoin(context.Background(), args[1:], os.Stdin, stdout, stderr, os.Getenv)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "orrery %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "orrery: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func runAgent(args []string, stderr io.Writer) int {
	cfg := agent.DefaultConfig()
	cfg.Version = version
	fs := flag.NewFlagSet("orrery agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	finishAgentFlags := cfg.RegisterFlags(fs)
	fs.DurationVar(&cfg.MemoryInterval, "memory-interval", cfg.MemoryInterval, "memory sampling period")
	ramLimit := fs.Uint64("ram-limit-mib", 0, "report at most this many MiB of RAM, total and available, to the cluster: a stand-in for a smaller machine in tests and demos (0: the machine's)")
	fs.DurationVar(&cfg.SystemInterval, "system-interval", cfg.SystemInterval, "CPU/GPU/temperature/power sampling period")
	fs.DurationVar(&cfg.DiskInterval, "disk-interval", cfg.DiskInterval, "disk sampling period (models directory)")
	fs.DurationVar(&cfg.NetworkInterval, "network-interval", cfg.NetworkInterval, "network interface sampling period")
	fs.DurationVar(&cfg.LinkInterval, "link-interval", cfg.LinkInterval, "link telemetry sampling period (RTT, per-peer MB/s)")
	fs.DurationVar(&cfg.DownloadIdle, "download-idle-timeout", cfg.DownloadIdle, "give up on a download connection (pulls, shards) that brings under 16 KiB in this long, and resume on a new one (1s..1h)")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", cfg.Heartbeat, "heartbeat and link-probe period")
	fs.DurationVar(&cfg.FailAfter, "fail-after", cfg.FailAfter, "silence after which a peer is marked gone")
	fs.DurationVar(&cfg.TraceMergeTimeout, "trace-merge-timeout", cfg.TraceMergeTimeout, "how long the master waits for a traced task's ranks before saving a partial trace")
	fs.IntVar(&cfg.RunnerThreads, "runner-threads", 0, "CPU threads per model runner (0: all)")
	fs.IntVar(&cfg.RunnerDraftThreads, "runner-draft-threads", 0, "CPU threads for a runner's draft model (0: one for a small draft, else --runner-threads; see orrery runner --help)")
	fs.BoolVar(&cfg.DirectLinks, "direct-links", cfg.DirectLinks, "link a tensor-parallel group's runners to each other directly (TLS under a secret derived from the cluster key, on the --peer-addr host), not through the agents; they fall back to the agents when a direct link fails")
	fs.Func("direct-ports", "ports for those direct links' listeners, FIRST-LAST (one per tensor-parallel rank on this node; default: any free port), for a firewall that opens a range", func(v string) (err error) {
		cfg.DirectPorts, err = agent.ParsePortRange(v)
		return err
	})
	fs.StringVar(&cfg.Speed, "speed", "auto", `this node's compute speed for "parallelism": "auto": "auto" (measured at start by orrery speed, about 3 s, and kept in the data dir), a file of orrery speed --json, or "off"`)
	fs.IntVar(&cfg.ContextLen, "ctx", 0, "context length of model runners in tokens (0: each model's own)")
	fs.BoolVar(&cfg.ContextShift, "context-shift", false, "let a generation run past the context: when a request's cache is full, drop the older half after BOS and go on (llama.cpp's context shift; off: such a max_tokens is a 400)")
	fs.Var(&cfg.GPULayers, "gpu-layers", "blocks of each rank of this node's runners on its GPU, unless an instance's \"gpuLayers\" says: auto (as many as fit), 0 (none) or a number (at most that many, the last blocks first)")
	fs.Var(gpuSwitch{&cfg.NoGPU}, "gpu", "on, or off: this node's runners never use its GPU (--gpu-layers 0, whatever an instance says)")
	fs.BoolVar(&cfg.GPUSoftware, "gpu-software", false, "let this node's runners put blocks on a software GPU (Mesa's lavapipe, which computes on the CPU; made visible to ggml): for tests, as auto never chooses one")
	fs.Var((*memSize)(&cfg.GPUMemory), "gpu-memory", "at most this much of the GPU's memory for each of this node's runners (e.g. 6GiB, 512MiB; a bare number is MiB), leaving the rest to other programs; the node publishes no more free memory than this for placement (default: all the device has free)")
	fs.IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "requests each instance placed from this node serves at once (slots sharing one KV cache of --ctx positions; batched together)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	finishAgentFlags()
	if *ramLimit > 1<<30 { // MiB: a pebibyte is past any machine
		fmt.Fprintf(stderr, "orrery agent: --ram-limit-mib %d: too large\n", *ramLimit)
		return 2
	}
	cfg.RAMLimit = *ramLimit << 20
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(*level))); err != nil {
		fmt.Fprintf(stderr, "orrery agent: --log-level %q: want debug, info, warn or error\n", *level)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	a, err := agent.New(cfg)
	if err != nil {
		cfg.Logger.Error("cannot start agent", "err", err)
		return 1
	}
	if tok, made, path := a.APIToken(); made {
		// Shown this once; it stays in path (mode 0600).
		fmt.Fprintf(stderr, "orrery agent: the API on %s answers other machines only with this token (kept in %s): %s\n", a.Addr(), path, tok)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		cfg.Logger.Error("agent failed", "err", err)
		return 1
	}
	return 0
}

// parseFlags parses a command's flags, which take no positional argument.
// When ok is false the command must exit with code: 0 after -h, 2 on a
// usage error (already reported on stderr).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// EnvAPIToken holds the token the commands that talk to an agent send
// (the agent's --api-token): needed when that agent is on another machine.
const EnvAPIToken = "ORRERY_API_TOKEN"

// apiClient is a client of the agent API at base (timeout: see
// client.Client), with the token from $ORRERY_API_TOKEN.
func apiClient(base string, timeout time.Duration) *client.Client {
	return &client.Client{BaseURL: base, Timeout: timeout, Token: os.Getenv(EnvAPIToken)}
}
