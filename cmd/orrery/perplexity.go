package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/engine/backend"
)

const perplexityUsage = `Usage: orrery perplexity --model PATH -f TEXT [flags]

Scores a text file with a model in this process, as llama-perplexity does
by default: the text is cut into chunks of --ctx tokens, each evaluated on a
fresh cache with BOS first, and the second half of each chunk is scored. It
prints the running perplexity per chunk, then the final estimate (or, with
--json, a report). The same file and --ctx give llama-perplexity's number
(make conformance holds them to each other on the trained KJV model).

Flags:
`

func runPerplexity(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery perplexity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), perplexityUsage)
		fs.PrintDefaults()
	}
	path := fs.String("model", "", "GGUF model to load")
	file := fs.String("f", "", "text file to score")
	nCtx := fs.Int("ctx", 512, "tokens per chunk (llama-perplexity's -c)")
	chunks := fs.Int("chunks", 0, "score at most this many chunks (0: all)")
	threads := fs.Int("threads", 1, "CPU threads")
	kv := fs.String("kv-type", "f16", "KV cache type: f16 or f32")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	gpu := addGPUFlags(fs, 0) // a reference for llama-perplexity: the CPU unless asked
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	var err error
	switch {
	case *path == "" || *file == "":
		err = errors.New("--model and -f are required")
	case *nCtx < 4 || *nCtx > 1<<20 || *threads < 1 || *chunks < 0:
		err = errors.New("--ctx must be 4..1048576, --threads ≥ 1 and --chunks ≥ 0")
	default:
		err = backend.CheckKVType(*kv)
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery perplexity: %v\n", err)
		return 2
	}
	text, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintf(stderr, "orrery perplexity: %v\n", err)
		return 1
	}
	progress := stderr
	if !*asJSON {
		progress = stdout
	}
	opts := backend.Options{Threads: *threads, KVType: *kv}
	_, w, err := gpu.setup(&opts)
	if err != nil {
		fmt.Fprintf(stderr, "orrery perplexity: %v\n", err)
		return 1
	}
	if w != "" {
		fmt.Fprintf(stderr, "orrery perplexity: warning: %s\n", w)
	}
	rep, err := bench.Perplexity(ctx, *path, string(text), *nCtx, *chunks, opts, loadRank, progress)
	if err != nil {
		fmt.Fprintf(stderr, "orrery perplexity: %v\n", err)
		return 1
	}
	if *asJSON {
		b, _ := json.Marshal(rep)
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	fmt.Fprintf(stdout, "Final estimate: PPL = %.4f +/- %.5f (%d tokens, %d chunks of %d, %d scored)\n",
		rep.Perplexity, rep.StdErr, rep.Tokens, rep.Chunks, rep.Ctx, rep.Scored)
	return 0
}
