package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/demo"
	"github.com/orrery-cluster/orrery/engine/chattmpl"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/modelstore"
)

const genModelUsage = `Usage: orrery gen-model [flags]

Writes a deterministic random-weight GGUF model: the same flags always give
the same bytes. It has a working tokenizer and a ChatML chat template, but
its output is gibberish: it exists to exercise the runner, the cluster and
benchmarks where no real weights can be downloaded.

Presets: tiny (4 layers, dim 64, F32, a few MB), small (8 layers, dim 512,
Q8_0, ~30 MB), 1b (16 layers, dim 2048, ff 8192, 32/8 heads, vocab 32000,
Q8_0, 1.17 GB). Other flags override the preset's fields.

Architectures (--arch): llama, llama3 (llama with Llama 3.x RoPE scaling:
rope_freqs, base 500000), qwen2, qwen3 (q/k norms, head size 2 × dim/heads),
qwen3moe (qwen3 with a mixture of experts: 8/2, 32/4 or 64/4 experts at the
tiny, small and 1b sizes, the 1b one 1.9 G weights of which 24 % are read
per token), gemma3 (tied embeddings, post-norms, GELU, a sliding window of
1/8 of the context on 5 of every 6 layers), phi3 (fused QKV and gate-up),
gpt-oss (attention sinks, biases, YaRN ×32, a sliding window of 1/8 of the
context, at most 128, on every other layer, and 8/2, 16/4 or 32/4 experts
with OpenAI's clamped SwiGLU; ship it with --type MXFP4), mistral3
(Ministral 3: YaRN ×16 over a 16th of the context, attention temperature),
deepseek2 (DeepSeek V3 / Kimi K2: multi-head latent attention, YaRN ×40, a
dense first block, then 8/2, 16/4 or 64/4 routed experts by sigmoid in 4
groups, and a shared expert), glm4moe (GLM-4.5: RoPE over half of each
head, q/k/v biases and q/k norms, deepseek2's experts without groups, and
one multi-token-prediction block after the trunk, which is not computed).
--pooling mean, cls or last writes <arch>.pooling_type, as llama.cpp's
llama-embedding reads it: an embedding model, which /v1/embeddings and
/api/embed serve (chat models are refused there).
llama.cpp loads every file gen-model writes.

Flags:
`

// runGenModel runs "orrery gen-model". Exit status: 0 done, 1 failed, 2 usage.
func runGenModel(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery gen-model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), genModelUsage)
		fs.PrintDefaults()
	}
	preset := fs.String("preset", "small", "shape to start from: tiny, small or 1b")
	arch := fs.String("arch", "llama", "architecture: "+strings.Join(model.Families, ", "))
	layers := fs.Int("layers", 0, "transformer blocks")
	dim := fs.Int("dim", 0, "embedding dimension (a multiple of 32)")
	ff := fs.Int("ff", 0, "feed-forward dimension (a multiple of 32)")
	heads := fs.Int("heads", 0, "attention heads")
	kvHeads := fs.Int("kv-heads", 0, "key/value heads (grouped-query attention)")
	vocab := fs.Int("vocab", 0, "vocabulary size")
	ctxLen := fs.Int("ctx", 0, "context length in tokens")
	typ := fs.String("type", "", "weight type: F32, F16, BF16, Q8_0 or Q4_0; MXFP4 for a mixture of experts (experts MXFP4, other matrices Q8_0)")
	yarn := fs.Float64("yarn", 0, "YaRN RoPE scaling factor (> 1), from an original context of --ctx (not for gemma3, phi3 or llama3; gpt-oss has 32 over 4096 unless set)")
	seed := fs.Uint64("seed", 0, "random seed")
	pooling := fs.String("pooling", "none", "make an embedding model: none, mean, cls or last (last also appends EOS to every text, as Qwen3-Embedding)")
	template := fs.String("chat-template", "", "file holding a Jinja chat template to write instead of the default (ChatML, tools in Qwen 2.5's Hermes style)")
	dataDir := fs.String("data-dir", agent.DefaultConfig().DataDir, "agent data directory; the model goes to <data-dir>/models unless -o")
	name := fs.String("name", "", "model id (file name without .gguf; default orrery-<preset>)")
	out := fs.String("o", "", "output file (default <data-dir>/models/<name>.gguf)")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	o, ok := model.Presets[*preset]
	if !ok {
		fmt.Fprintf(stderr, "orrery gen-model: --preset %q: want tiny, small or 1b\n", *preset)
		return 2
	}
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	set(&o.Layers, *layers)
	set(&o.Dim, *dim)
	set(&o.FFDim, *ff)
	set(&o.Heads, *heads)
	set(&o.KVHeads, *kvHeads)
	set(&o.Vocab, *vocab)
	set(&o.ContextLen, *ctxLen)
	o.YaRN = *yarn // before the family, which may set its own
	o, err := model.ApplyFamily(o, *arch)
	if err != nil {
		fmt.Fprintf(stderr, "orrery gen-model: --arch: %v\n", err)
		return 2
	}
	if *typ != "" {
		o.Type = strings.ToUpper(*typ)
	}
	o.Seed = *seed
	if o.Pooling, err = model.ParsePooling(*pooling); err != nil {
		fmt.Fprintf(stderr, "orrery gen-model: --pooling: %v\n", err)
		return 2
	}
	if o.ChatTemplate, err = readTemplate(*template); err != nil {
		fmt.Fprintf(stderr, "orrery gen-model: --chat-template: %v\n", err)
		return 2
	}
	path, err := genModelPath(*out, *dataDir, *name, *preset, *arch)
	if err != nil {
		fmt.Fprintf(stderr, "orrery gen-model: %v\n", err)
		return 2
	}
	size, err := model.GenSize(o)
	if err != nil {
		fmt.Fprintf(stderr, "orrery gen-model: %v\n", err)
		return 2
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		fmt.Fprintf(stderr, "orrery gen-model: %v\n", err)
		return 1
	}
	start, last := time.Now(), time.Time{}
	fmt.Fprintf(stderr, "writing %s (%s, %s)\n", path, humanBytes(int64(size)), demo.ModelShape(o))
	err = model.GenerateProgress(path, o, func(done, total uint64) {
		if now := time.Now(); now.Sub(last) >= time.Second || done == total {
			last = now
			el := now.Sub(start).Seconds()
			rate := float64(done) / 1e6 / max(el, 1e-9)
			eta := ""
			if rate > 0 && done < total {
				eta = fmt.Sprintf(", %.0f s left", float64(total-done)/1e6/rate)
			}
			fmt.Fprintf(stderr, "\r  %5.1f%%  %s of %s  %.0f MB/s%s   ", 100*float64(done)/float64(max(total, 1)),
				humanBytes(int64(done)), humanBytes(int64(total)), rate, eta)
		}
	})
	fmt.Fprintln(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "orrery gen-model: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", path)
	fmt.Fprintf(stderr, "done in %.1f s. Random weights: this model's output is gibberish.\n", time.Since(start).Seconds())
	return 0
}

const modelsUsage = `Usage: orrery models ls [--data-dir DIR] [--json]
       orrery models rm [--api URL] [--node ID] MODEL

ls lists the GGUF models on this machine: <data-dir>/models, Ollama's store (~/.ollama/models or $OLLAMA_MODELS), LM Studio
(~/.lmstudio/models) and the Hugging Face cache (~/.cache/huggingface/hub,
or $HF_HUB_CACHE / $HF_HOME/hub), with size, architecture, layers,
quantization (llama.cpp's name for the file type, e.g. Q4_K_M) and the
tensor type mix by bytes. A model this runner cannot serve (an unsupported
architecture or tensor type) is listed with the reason.

rm asks the running agent to delete a model from its machine (or, with
--node, from another node of its cluster), as the store's own tool would:
every part of the GGUF; in the Hugging Face cache its snapshot links and
the blobs nothing else links to; in Ollama's store the manifest and the
blobs no other manifest names. A model an instance uses there is refused.
`

// runModels runs "orrery models ls" and "orrery models rm".
func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "rm" {
		return runModelsRm(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "ls" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, modelsUsage)
			return 0
		}
		fmt.Fprint(stderr, modelsUsage)
		return 2
	}
	fs := flag.NewFlagSet("orrery models ls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, modelsUsage) }
	dataDir := fs.String("data-dir", agent.DefaultConfig().DataDir, "agent data directory")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, ok := parseFlags(fs, args[1:], stderr); !ok {
		return code
	}
	home, _ := os.UserHomeDir()
	s := &modelstore.Scanner{Dirs: modelstore.DefaultDirs(*dataDir, home, os.Getenv)}
	ms := s.Scan()
	if *asJSON {
		if ms == nil {
			ms = []modelstore.Entry{}
		}
		b, _ := json.MarshalIndent(map[string]any{"models": ms}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	if len(ms) == 0 {
		fmt.Fprintf(stdout, "no models found (looked in %s). Make one with: orrery gen-model\n", strings.Join(nonEmpty(s.Dirs), ", "))
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSOURCE\tSIZE\tARCH\tLAYERS\tQUANT\tTYPES\tNOTE")
	for _, m := range ms {
		layers := "-"
		if m.Layers > 0 {
			layers = fmt.Sprint(m.Layers)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Source, humanBytes(m.SizeBytes), orDash(m.Arch), layers, orDash(m.Quantization), orDash(model.TypeMix(m.Types)), m.Error)
	}
	tw.Flush()
	return 0
}

func nonEmpty(d modelstore.Dirs) []string {
	return slices.DeleteFunc([]string{d.Orrery, d.Ollama, d.LMStudio, d.HuggingFace}, func(s string) bool { return s == "" })
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// readTemplate is the chat template in file ("" for none), checked to
// compile.
func readTemplate(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if _, err := chattmpl.Compile(string(src)); err != nil {
		return "", err
	}
	return string(src), nil
}

// genModelPath is where gen-model writes: out, or <dataDir>/models/<name>.gguf
// with name orrery-<preset>[-<arch>] by default.
func genModelPath(out, dataDir, name, preset, arch string) (string, error) {
	if out != "" {
		return out, nil
	}
	if name == "" {
		name = "orrery-" + preset
		if arch != "llama" {
			name += "-" + arch
		}
	}
	if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("--name %q: want a plain file name", name)
	}
	return filepath.Join(dataDir, "models", name+".gguf"), nil
}

func runModelsRm(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "orrery models rm"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, modelsUsage); fs.PrintDefaults() }
	apiURL := fs.String("api", client.DefaultBaseURL, "API URL of the agent")
	node := fs.String("node", "", "node to delete the model from (default: the agent's own)")
	id, base, code, ok := oneArgAndAPI(fs, args, name, "model id", modelsUsage, apiURL, stderr)
	if !ok {
		return code
	}
	d, err := apiClient(base, 0).DeleteModel(ctx, id, *node)
	if err != nil {
		reportAPIError(stderr, name, base, err)
		return 1
	}
	fmt.Fprintf(stdout, "deleted %s from node %s: %d files, %s freed\n", d.Model, d.Node, len(d.Files), humanBytes(d.FreedBytes))
	return 0
}
