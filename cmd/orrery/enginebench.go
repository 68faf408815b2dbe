package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/trace"
)

const engineBenchUsage = `Usage: orrery engine-bench --model PATH [flags]

Loads a GGUF model in this process (weights read into memory) and times,
like llama-bench: prefill of a --pp-token prompt in one batch (tok/s, and
the time to the first token) and decode of --tg tokens one at a time from
an empty context (tok/s), --repeat times each, with tracing off and on. It
also measures this machine's memory read bandwidth and the decode bound it
sets (bandwidth / weight bytes).

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
	asJSON := fs.Bool("json", false, "print JSON")
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
	ctxLen := max(*pp, *tg) + 8
	start := time.Now()
	rank, err := loadRank(ctx, *path, backend.Options{Threads: *threads, BatchSize: max(*pp, 1), ContextLen: ctxLen, NoFlashAttention: *noFA}, nil)
	if err != nil {
		fmt.Fprintf(stderr, "orrery engine-bench: %v\n", err)
		return 1
	}
	defer rank.Close()
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
	var out []benchRow
	for _, k := range order {
		r := rows[k]
		r.Mean, r.SD = meanSD(r.TokPerS)
		if strings.HasPrefix(r.Test, "pp") {
			r.TTFTMsMu, _ = meanSD(ttft[r.Traced])
		}
		out = append(out, *r)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(map[string]any{"model": *path, "weightBytes": weightBytes, "threads": *threads,
			"rows": out, "readBandwidthGBps": gbps, "decodeBoundTokPerSec": gbps * 1e9 / float64(weightBytes)}, "", "  ")
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
	if gbps > 0 {
		fmt.Fprintf(stdout, "memory read bandwidth %.1f GB/s (%d threads): decode bound %.1f tok/s for %s of weights\n",
			gbps, *threads, gbps*1e9/float64(weightBytes), humanBytes(weightBytes))
	}
	return 0
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
