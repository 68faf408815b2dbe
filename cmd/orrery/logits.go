package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

const logitsUsage = `Usage: orrery logits --model PATH [flags]

Loads a GGUF model in this process, runs a prompt of token ids through it
and decodes greedily (always the most likely token), and prints as JSON the
tokens chosen and the logits each choice came from: those of the prompt's
last position, then of each decoded token. Nothing else runs: no agent, no
sampler, no template. It is how two builds of the engine (for example amd64
and arm64 under emulation, scripts/dist-test.sh) are held to each other,
and the GPU to the CPU: the model runs on the CPU unless --gpu-layers puts
blocks on a GPU (--gpu-layers 999: every block and the output head, or an
error), and "offload" in the output says where they went.

Flags:
`

// logitsReport is orrery logits' output.
type logitsReport struct {
	Model  string      `json:"model"`
	Prompt []int32     `json:"prompt"`
	Tokens []int32     `json:"tokens"`
	Logits [][]float32 `json:"logits"`
	// Offload is where the blocks went, GPU or CPU.
	Offload runnerapi.Offload `json:"offload"`
}

func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery logits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), logitsUsage)
		fs.PrintDefaults()
	}
	path := fs.String("model", "", "GGUF model to load")
	ids := fs.String("prompt-ids", "1,2,3,4,5,6,7,8", "the prompt: comma-separated token ids")
	gen := fs.Int("gen", 8, "tokens to decode greedily (1..4096)")
	threads := fs.Int("threads", 1, "CPU threads")
	kv := fs.String("kv-type", "f16", "KV cache type: f16 or f32")
	gpu := addGPUFlags(fs, 0) // a reference: the CPU unless asked
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	prompt, err := parseIDs(*ids)
	if err == nil && *path == "" {
		err = errors.New("--model is required")
	}
	if err == nil && (*gen < 1 || *gen > 4096 || *threads < 1) {
		err = errors.New("--gen must be 1..4096 and --threads ≥ 1")
	}
	if err == nil {
		err = backend.CheckKVType(*kv)
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery logits: %v\n", err)
		return 2
	}
	opts := backend.Options{Threads: *threads, KVType: *kv}
	_, w, err := gpu.setup(&opts)
	if err != nil {
		fmt.Fprintf(stderr, "orrery logits: %v\n", err)
		return 1
	}
	if w != "" {
		fmt.Fprintf(stderr, "orrery logits: warning: %s\n", w)
	}
	rep, err := greedyLogits(ctx, *path, prompt, *gen, opts)
	if err != nil {
		fmt.Fprintf(stderr, "orrery logits: %v\n", err)
		return 1
	}
	b, _ := json.Marshal(rep)
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

// parseIDs reads "1,2,3": at least one non-negative token id.
func parseIDs(s string) ([]int32, error) {
	var out []int32
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--prompt-ids: %q is not a token id", f)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

// greedyLogits runs prompt then gen greedy steps on one rank holding the
// whole model.
func greedyLogits(ctx context.Context, path string, prompt []int32, gen int, opts backend.Options) (*logitsReport, error) {
	opts.BatchSize = len(prompt)
	r, err := loadRank(ctx, path, opts, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rep := &logitsReport{Model: path, Prompt: prompt, Offload: r.Offload()}
	tokens, pos := prompt, 0
	for range gen {
		b := backend.Batch{Tokens: tokens}
		for i := range tokens {
			b.Positions = append(b.Positions, int32(pos+i))
		}
		res, err := r.Forward(ctx, b)
		if err != nil {
			return nil, fmt.Errorf("forward at position %d: %w", pos, err)
		}
		if len(res.Logits) == 0 {
			return nil, errors.New("the model gave no logits (a pipeline shard, not a whole model?)")
		}
		next := int32(argmax(res.Logits))
		rep.Logits = append(rep.Logits, res.Logits)
		rep.Tokens = append(rep.Tokens, next)
		pos += len(tokens)
		tokens = []int32{next}
	}
	return rep, nil
}

// argmax is the index of the largest value, the first among equals.
func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
