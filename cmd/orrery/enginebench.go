package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/trace"
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

type benchRow struct {
	Test     string    `json:"test"`
	Traced   bool      `json:"traced"`
	Tokens   int       `json:"tokens"`
	TokPerS  []float64 `json:"tokPerSec"`
	Mean     float64   `json:"meanTokPerSec"`
	SD       float64   `json:"sdTokPerSec"`
	TTFTMsMu float64   `json:"ttftMs,omitempty"`
}

func runEngineBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery engine-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), engineBenchUsage)
		fs.PrintDefaults()
	}
	path := fs.String("model", "", "GGUF model to load")
	threads := fs.Int("threads", runtime.NumCPU(), "CPU threads")
	pp := fs.Int("pp", 128, "prompt tokens for the prefill test (0: skip)")
	tg := fs.Int("tg", 64, "tokens for the decode test (0: skip)")
	repeat := fs.Int("repeat", 3, "runs of each test")
	bw := fs.Bool("bandwidth", true, "measure memory read bandwidth")
	noFA := fs.Bool("no-flash-attn", false, "compute attention as separate ops instead of the fused flash-attention kernel")
	noRepack := fs.Bool("no-repack", false, "keep Q4_0/Q4_K/IQ4_NL weights unpacked (ggml's plain kernels)")
	asJSON := fs.Bool("json", false, "print JSON")
	vsLlama := fs.Bool("vs-llama-bench", false, "also run llama.cpp's llama-bench on the same file and print the ratios")
	llamaBench := fs.String("llama-bench", llamaref.Bin(llamaref.Dir(), "llama-bench"), "the llama-bench binary for --vs-llama-bench")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *path == "" || *repeat < 1 || *pp < 0 || *tg < 0 {
		fmt.Fprintln(stderr, "orrery engine-bench: --model is required; --repeat ≥ 1, --pp and --tg ≥ 0")
		return 2
	}
	f, err := gguf.ReadFile(*path)
	if err == nil {
		_, err = model.FromGGUF(f)
	}
	var tok *model.Tokenizer
	if err == nil {
		tok, err = model.NewTokenizer(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
		return 1
	}
	var weightBytes int64
	for _, t := range f.Tensors {
		weightBytes += int64(t.Size)
	}
	// Measured before the model is loaded: 1 GiB more resident while the
	// weights are would only add noise.
	var gbps float64
	if *bw {
		gbps = readBandwidth(*threads)
	}
	lb := llamaBenchRun{bin: *llamaBench, model: *path, pp: *pp, tg: *tg, threads: *threads, repeat: *repeat, flashAttn: !*noFA}
	var llamaRuns []map[string]float64
	if *vsLlama {
		fmt.Fprintf(stderr, "running llama-bench (1 of 2)…\n")
		r, err := lb.run(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
			return 1
		}
		llamaRuns = append(llamaRuns, r)
	}
	ctxLen := max(*pp, *tg) + 8
	start := time.Now()
	rank, err := loadRank(ctx, *path, backend.Options{Threads: *threads, BatchSize: max(*pp, 1), ContextLen: ctxLen, NoFlashAttention: *noFA, NoRepack: *noRepack}, nil)
	if err != nil {
		fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
		return 1
	}
	// Closed before the second llama-bench run, so that both engines'
	// weights are never resident together.
	closeRank := sync.OnceFunc(rank.Close)
	defer closeRank()
	fmt.Fprintf(stderr, "loaded %s in %.1f s (%s of weights, %d threads)\n", *path, time.Since(start).Seconds(), humanBytes(weightBytes), *threads)
	g := &runner.Generator{M: &runner.Local{F: rank}, Tok: tok}
	vocab := rank.Config().Vocab
	noop := func(runner.Piece) error { return nil }
	// Runs alternate untraced and traced, pp and tg, so that the VM's
	// drift affects both sides alike; run 0 of each warms up.
	rows := map[string]*benchRow{}
	var order []string
	row := func(test string, traced bool, tokens int) *benchRow {
		key := fmt.Sprint(test, traced)
		if rows[key] == nil {
			rows[key] = &benchRow{Test: test, Traced: traced, Tokens: tokens}
			order = append(order, key)
		}
		return rows[key]
	}
	ttft := map[bool][]float64{}
	for i := 0; i <= *repeat; i++ {
		for _, traced := range []bool{false, true} {
			if *pp > 0 {
				prompt := make([]int32, *pp)
				for k := range prompt {
					prompt[k] = int32((k*7919 + i*31 + 300) % vocab)
				}
				res, err := g.Generate(ctx, &runner.Request{MaxTokens: 1, IgnoreEOS: true}, prompt, benchRecorder(traced), noop)
				if err != nil {
					fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
					return 1
				}
				r := row(fmt.Sprintf("pp%d", *pp), traced, *pp)
				if i > 0 {
					r.TokPerS = append(r.TokPerS, res.PrefillTokPerSec())
					ttft[traced] = append(ttft[traced], float64(res.FirstTokenNs)/1e6)
				}
			}
			if *tg > 0 {
				res, err := g.Generate(ctx, &runner.Request{MaxTokens: *tg + 1, IgnoreEOS: true}, []int32{1}, benchRecorder(traced), noop)
				if err != nil {
					fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
					return 1
				}
				r := row(fmt.Sprintf("tg%d", *tg), traced, *tg)
				if i > 0 {
					r.TokPerS = append(r.TokPerS, res.DecodeTokPerSec())
				}
			}
		}
	}
	closeRank()
	if *vsLlama {
		fmt.Fprintf(stderr, "running llama-bench (2 of 2)…\n")
		r, err := lb.run(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
			return 1
		}
		llamaRuns = append(llamaRuns, r)
	}
	var out []benchRow
	for _, k := range order {
		r := rows[k]
		r.Mean, r.SD = meanSD(r.TokPerS)
		if strings.HasPrefix(r.Test, "pp") {
			r.TTFTMsMu, _ = meanSD(ttft[r.Traced])
		}
		out = append(out, *r)
	}
	var vs []vsRow
	if *vsLlama {
		for _, r := range out {
			if r.Traced {
				continue
			}
			v := vsRow{Test: r.Test, Orrery: r.Mean}
			for _, run := range llamaRuns {
				v.LlamaRuns = append(v.LlamaRuns, run[r.Test])
			}
			v.Llama = mean(v.LlamaRuns)
			if v.Llama > 0 {
				v.Ratio = v.Orrery / v.Llama
			}
			vs = append(vs, v)
		}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(map[string]any{"model": *path, "weightBytes": weightBytes, "threads": *threads,
			"rows": out, "readBandwidthGBps": gbps, "decodeBoundTokPerSec": gbps * 1e9 / float64(weightBytes), "vsLlamaBench": vs}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEST\tTRACING\tTOK/S\t±\tTTFT MS")
	for _, r := range out {
		on := "off"
		if r.Traced {
			on = "on"
		}
		ttft := ""
		if r.TTFTMsMu > 0 {
			ttft = fmt.Sprintf("%.1f", r.TTFTMsMu)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%s\n", r.Test, on, r.Mean, r.SD, ttft)
	}
	tw.Flush()
	if len(vs) > 0 {
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TEST\tORRERY TOK/S\tLLAMA-BENCH TOK/S (BEFORE, AFTER)\tRATIO")
		for _, v := range vs {
			var runs []string
			for _, x := range v.LlamaRuns {
				runs = append(runs, fmt.Sprintf("%.2f", x))
			}
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f (%s)\t%.2f×\n", v.Test, v.Orrery, v.Llama, strings.Join(runs, ", "), v.Ratio)
		}
		tw.Flush()
	}
	if gbps > 0 {
		fmt.Fprintf(stdout, "memory read bandwidth %.1f GB/s (%d threads): decode bound %.1f tok/s for %s of weights\n",
			gbps, *threads, gbps*1e9/float64(weightBytes), humanBytes(weightBytes))
	}
	return 0
}

// vsRow is one test side by side with llama-bench.
type vsRow struct {
	Test      string    `json:"test"`
	Orrery    float64   `json:"orreryTokPerSec"`
	Llama     float64   `json:"llamaBenchTokPerSec"`
	LlamaRuns []float64 `json:"llamaBenchRuns"`
	Ratio     float64   `json:"ratio"`
}

// llamaBenchRun runs llama.cpp's llama-bench with engine-bench's settings.
type llamaBenchRun struct {
	bin, model              string
	pp, tg, threads, repeat int
	flashAttn               bool
}

// run returns the mean tok/s by test name ("pp128", "tg64").
func (l llamaBenchRun) run(ctx context.Context) (map[string]float64, error) {
	fa := "off"
	if l.flashAttn {
		fa = "on"
	}
	cmd := exec.CommandContext(ctx, l.bin, "-m", l.model, "-p", strconv.Itoa(l.pp), "-n", strconv.Itoa(l.tg),
		"-t", strconv.Itoa(l.threads), "-r", strconv.Itoa(l.repeat), "-fa", fa, "-lm", "none", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return nil, fmt.Errorf("llama-bench (%s; build it with scripts/llama-ref.sh): %w\n%s", l.bin, err, msg)
	}
	var tests []struct {
		NPrompt int     `json:"n_prompt"`
		NGen    int     `json:"n_gen"`
		AvgTS   float64 `json:"avg_ts"`
	}
	if err := json.Unmarshal(out, &tests); err != nil {
		return nil, fmt.Errorf("llama-bench output: %w", err)
	}
	res := map[string]float64{}
	for _, t := range tests {
		switch {
		case t.NPrompt > 0 && t.NGen == 0:
			res[fmt.Sprintf("pp%d", t.NPrompt)] = t.AvgTS
		case t.NGen > 0 && t.NPrompt == 0:
			res[fmt.Sprintf("tg%d", t.NGen)] = t.AvgTS
		}
	}
	return res, nil
}

func benchRecorder(on bool) *trace.Recorder {
	if !on {
		return nil
	}
	return trace.NewRecorder(0, "bench", trace.Options{})
}

func meanSD(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	m := mean(xs)
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return m, math.Sqrt(v)
}

// readBandwidth is the best of 3 passes of threads goroutines summing a
// 1 GiB buffer (far past any cache), in GB/s.
func readBandwidth(threads int) float64 {
	const n = 1 << 27 // uint64s
	a := make([]uint64, n)
	for i := range a {
		a[i] = uint64(i)
	}
	threads = max(threads, 1)
	chunk := n / threads
	var best float64
	sums := make([]uint64, threads)
	for range 3 {
		var wg sync.WaitGroup
		t := time.Now()
		for k := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sums[k] = sumWords(a[k*chunk : (k+1)*chunk])
			}()
		}
		wg.Wait()
		best = max(best, float64(chunk*threads*8)/time.Since(t).Seconds()/1e9)
	}
	if slices.Contains(sums, 1) { // keep the sums alive
		fmt.Fprint(os.Stderr, "")
	}
	return best
}

func sumWords(a []uint64) uint64 {
	var s0, s1, s2, s3 uint64
	for i := 0; i+3 < len(a); i += 4 {
		s0 += a[i]
		s1 += a[i+1]
		s2 += a[i+2]
		s3 += a[i+3]
	}
	return s0 + s1 + s2 + s3
}
