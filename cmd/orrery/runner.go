package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

const runnerUsage = `Usage: orrery runner --model PATH [flags]

The model runner: a child process the agent starts for each rank of each
instance (not meant to be run by hand). It listens on 127.0.0.1 on a free
port, prints "` + runnerapi.ListenPrefix + `ADDR", loads the model (or its shard)
and serves completions to the agent, which must send the token from
$` + runnerapi.TokenEnv + `. With --ranks > 1 it also sets up its rank links through
the agent at --agent-api, and exits when a link breaks. It exits when its
stdin closes (the agent is gone) or on SIGTERM.

Flags:
`

func runRunner(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("orrery runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runnerUsage)
		fs.PrintDefaults()
	}
	var opts backend.Options
	path := fs.String("model", "", "GGUF model (or shard) to load")
	fs.IntVar(&opts.Threads, "threads", runtime.NumCPU(), "CPU threads for compute")
	fs.IntVar(&opts.ContextLen, "ctx", 0, "context length in tokens (0: the model's)")
	fs.IntVar(&opts.BatchSize, "batch", 512, "prompt tokens per forward pass")
	fs.IntVar(&opts.Parallel, "parallel", 1, "requests served at once (slots sharing one KV cache of --ctx positions)")
	fs.StringVar(&opts.KVType, "kv-type", "f16", "KV cache type: f16 or f32")
	contextShift := fs.Bool("context-shift", false, "let a generation run past the context: drop the older half of a full slot's cache (after BOS) and go on")
	fs.BoolVar(&opts.NoFlashAttention, "no-flash-attn", false, "compute attention as separate ops instead of the fused flash-attention kernel")
	fs.IntVar(&opts.FirstLayer, "first-layer", 0, "first block this rank holds")
	fs.IntVar(&opts.LastLayer, "last-layer", 0, "end of this rank's blocks (0: the last)")
	gpu := addGPUFlags(fs, runnerapi.GPUAuto)
	node := fs.String("node", "", "node id stamped on trace spans")
	instance := fs.String("instance", "", "instance this rank belongs to")
	rank := fs.Int("rank", 0, "this runner's rank in the pipeline")
	ranks := fs.Int("ranks", 1, "ranks in the pipeline (1: the whole model here)")
	agentAPI := fs.String("agent-api", "", "the agent's loopback API (host:port), for rank links and spans when --ranks > 1")
	nodeName := fs.String("node-name", "", "node name stamped on trace spans")
	tpRank := fs.Int("tp-rank", 0, "this runner's rank in its tensor-parallel group (its --model is that rank's slice)")
	tpRanks := fs.Int("tp-ranks", 1, "ranks in the tensor-parallel group (1: none)")
	tpAddrs := fs.String("tp-addrs", "", "every tensor-parallel rank's loopback link address, comma-separated, in rank order (this rank listens on its own; the group's token is $"+runnerapi.GroupTokenEnv+"); empty: the agent at --agent-api arranges the links (direct, where it granted a listener and a link secret; else through it, as a pipeline's)")
	tpWire := fs.String("tp-wire", "f32", "how the group's all-reduces send their values: f32 (the sum to the bit), or f16 or bf16 (half the bytes, each rank's part rounded; every rank of the group must agree; see docs/inference.md for what it costs)")
	draftModel := fs.String("draft-model", "", "rank 0: a draft model (GGUF with the same vocabulary) for speculative decoding")
	draftThreads := fs.Int("draft-threads", 0, fmt.Sprintf("CPU threads for the draft model (0: one for a draft of at most %d MiB of weights, whose ops are too short to share; else --threads)", runnerapi.SmallDraftBytes>>20))
	speculative := fs.String("speculative", "", `rank 0: the speculation of requests that name none, as JSON: {"draft": "ngram" or the --draft-id, "max": K, "min": N, "p_min": P} (a request's {"draft": "none"} turns it off)`)
	draftID := fs.String("draft-id", "", "the name requests give the draft model in \"speculative\": {\"draft\": ID} (default: its file name without .gguf)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *path == "" {
		fmt.Fprintln(stderr, "orrery runner: --model is required")
		return 2
	}
	token := getenv(runnerapi.TokenEnv)
	if token == "" {
		fmt.Fprintf(stderr, "orrery runner: $%s is not set (the agent sets it)\n", runnerapi.TokenEnv)
		return 2
	}
	log, ok := runnerLogger(*level, stderr)
	if !ok {
		return 2
	}
	defSpec, err := parseSpeculation(*speculative, draftIDOf(*draftID, *draftModel))
	shape, instRank, serr := runnerapi.ParseRunnerArgs(*rank, *ranks, *tpRank, *tpRanks)
	switch {
	case serr != nil:
		fmt.Fprintf(stderr, "orrery runner: %v\n", serr)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "orrery runner: --speculative: %v\n", err)
		return 2
	}
	if err := prepareEngine(gpu, &opts, log); err != nil {
		fmt.Fprintf(stderr, "orrery runner: %v\n", err)
		return 2
	}
	cfg := runner.Config{ModelPath: *path, Options: opts, Load: loadRank, Token: token,
		Node: *node, NodeName: *nodeName, Logger: log, Instance: *instance, Shape: shape, Rank: instRank, ContextShift: *contextShift,
		DraftModelPath: *draftModel, DraftID: draftIDOf(*draftID, *draftModel), DraftThreads: *draftThreads, DefaultSpeculation: defSpec}
	if shape.TensorParallel() {
		ln, err := tpSetup(&cfg, *tpRank, *tpRanks, *tpAddrs, *tpWire, *agentAPI, getenv)
		if err != nil {
			fmt.Fprintf(stderr, "orrery runner: %v\n", err)
			return 2
		}
		defer ln.Close()
	}
	if shape.Pipeline > 1 {
		if *agentAPI == "" || *instance == "" {
			fmt.Fprintln(stderr, "orrery runner: --agent-api and --instance are required with --ranks > 1")
			return 2
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Error("rank listen", "err", err)
			return 1
		}
		defer ln.Close()
		cfg.RankListener = ln
		cfg.DialNext = func(ctx context.Context) (net.Conn, error) { return runnerapi.DialRankLink(ctx, *agentAPI, token) }
	}
	if shape.Ranks() > 1 && *agentAPI != "" {
		cfg.OnStageTrace = postTrace(*agentAPI, token, log)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runner.Serve(ctx, cfg, stdout, stdin); err != nil {
		log.Error("runner failed", "err", err)
		return 1
	}
	return 0
}

// prepareEngine warns of a slow ggml build and prepares the GPU backends
// as gpu says, setting opts' GPU options. It runs before anything loads:
// ollama loads the GPU backends once, at the first model. (The draft
// model's blocks follow the target's: runner.Config.)
func prepareEngine(gpu *gpuFlags, opts *backend.Options, log *slog.Logger) error {
	if w := engineBuildWarning(); w != "" {
		log.Warn(w)
	}
	backends, w, err := gpu.setup(opts)
	if err != nil {
		return err
	}
	log.Info("GPU backends", "from", backends.String(), "gpuLayers", opts.GPULayers.String(), "software", opts.GPUSoftware, "gpuMemoryMiB", opts.GPUMemory>>20)
	if w != "" {
		log.Warn(w)
	}
	return nil
}

// postTrace hands a pipeline stage's, or a tensor-parallel follower's,
// spans of a traced request to its agent.
func postTrace(agentAPI, token string, log *slog.Logger) func(string, []trace.Span, []trace.CounterSample, error) {
	return func(id string, spans []trace.Span, counters []trace.CounterSample, err error) {
		t := runnerapi.RankTrace{TraceID: id, Spans: spans, Counters: counters}
		if err != nil {
			t.Error = err.Error()
		}
		if err := runnerapi.PostRankTrace(context.Background(), agentAPI, token, t); err != nil {
			log.Warn("hand spans to the agent", "trace", id, "err", err)
		}
	}
}

// tpSetup makes cfg a tensor-parallel rank of its group (collective.Group:
// over loopback addresses, or as its agent arranges), its all-reduces
// over wire. It returns the rank's listener.
func tpSetup(cfg *runner.Config, rank, ranks int, addrs, wire, agentAPI string, getenv func(string) string) (net.Listener, error) {
	w, err := collective.ParseWire(wire)
	if err != nil {
		return nil, fmt.Errorf("--tp-wire: %w", err)
	}
	g := collective.Group{Rank: rank, Ranks: ranks, Wire: w, Addrs: collective.SplitAddrs(addrs), Token: getenv(runnerapi.GroupTokenEnv),
		AgentAPI: agentAPI, Instance: cfg.Instance, RunnerToken: cfg.Token, Log: cfg.Logger}
	if len(g.Addrs) == 0 {
		if g.Direct, err = collective.DirectFromEnv(getenv); err != nil {
			return nil, err
		}
	}
	connect, ln, err := g.Listen()
	if err != nil {
		return nil, err
	}
	cfg.TPConnect = connect
	if len(g.Addrs) == 0 {
		cfg.MeshListener = ln // the agent connects the higher ranks here
	}
	return ln, nil
}

// draftIDOf is the draft model's id: id, else its file name less .gguf
// ("" without a draft model).
func draftIDOf(id, path string) string {
	if path == "" {
		return id
	}
	return cmp.Or(id, strings.TrimSuffix(filepath.Base(path), ".gguf"))
}

// parseSpeculation reads --speculative ("": none), checked against what
// the runner drafts with (draftID: its draft model's, "" none).
func parseSpeculation(v, draftID string) (*runnerapi.Speculation, error) {
	if v == "" {
		return nil, nil
	}
	var sp runnerapi.Speculation
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return nil, fmt.Errorf("%q: %w", v, err)
	}
	if err := sp.CheckDefault(draftID); err != nil {
		return nil, err
	}
	return &sp, nil
}

// runnerLogger is the runner's logger at level, also slog's default
// (ollama's ggml package logs through it); false after saying why not.
func runnerLogger(level string, stderr io.Writer) (*slog.Logger, bool) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		fmt.Fprintf(stderr, "orrery runner: --log-level %q: want debug, info, warn or error\n", level)
		return nil, false
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("component", "runner", "pid", os.Getpid())
	slog.SetDefault(log)
	return log, true
}
