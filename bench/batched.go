package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// Batched serving on one node: B requests at once through the runner's
// scheduler (continuous batching over B slots), as llama.cpp's
// llama-batched-bench measures B sequences decoded together; and the time
// to first token of a conversation's second turn, which the prefix cache
// serves.

// BatchedOptions configures Batched.
type BatchedOptions struct {
	Model   string
	Threads int
	// PP and TG are each request's prompt and generated tokens; Conc the
	// numbers of requests at once; each runs Repeat times after a warmup.
	PP, TG, Repeat int
	Conc           []int
	// Turn, when > 0, is the prompt length of a conversation's first
	// turn: the second adds the answer and TurnAdd new tokens.
	Turn, TurnAdd int
	// LlamaBatchedBench, when set, is llama.cpp's llama-batched-bench,
	// run on the same file with the same shapes for comparison.
	LlamaBatchedBench string
	// GPULayers and GPUSoftware say what goes on a GPU (backend.Options;
	// the zero value: nothing).
	GPULayers   runnerapi.GPULayers
	GPUSoftware bool
}

// BatchedReport is what Batched measured (batch-bench's --json).
type BatchedReport struct {
	Model   string       `json:"model"`
	Threads int          `json:"threads"`
	PP      int          `json:"pp"`
	TG      int          `json:"tg"`
	Rows    []BatchedRow `json:"rows"`
	// Turn1Ms and Turn2Ms are the conversation's times to first token;
	// Turn2Cached the second turn's prompt tokens served from the cache.
	TurnTokens  [2]int  `json:"turnTokens,omitempty"`
	Turn1Ms     float64 `json:"turn1TTFTMs,omitempty"`
	Turn2Ms     float64 `json:"turn2TTFTMs,omitempty"`
	Turn2Cached int     `json:"turn2CachedTokens,omitempty"`
	// Offload is where the blocks went, GPU or CPU.
	Offload runnerapi.Offload `json:"offload"`
}

// BatchedRow is one concurrency: aggregate prefill and decode tok/s (all
// requests' tokens over the phase's wall time), means of the runs, and
// llama-batched-bench's for the same B when it ran.
type BatchedRow struct {
	Concurrency   int       `json:"concurrency"`
	PrefillTokS   float64   `json:"prefillTokPerSec"`
	DecodeTokS    float64   `json:"decodeTokPerSec"`
	DecodeRuns    []float64 `json:"decodeRuns"`
	LlamaPrefill  *float64  `json:"llamaPrefillTokPerSec,omitempty"`
	LlamaDecode   *float64  `json:"llamaDecodeTokPerSec,omitempty"`
	DecodeVsLlama *float64  `json:"decodeVsLlama,omitempty"`
}

// Batched loads the model with max(Conc) slots and runs the tests;
// llama-batched-bench, when asked for, runs before and after them, so that
// the machine's drift hits both alike, and its figures are the means.
func Batched(ctx context.Context, o BatchedOptions, load runner.LoadFunc, log io.Writer) (*BatchedReport, error) {
	f, err := gguf.ReadFile(o.Model)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		return nil, err
	}
	ctxLen := max(slices.Max(o.Conc)*(o.PP+o.TG+2), o.Turn+o.TG+o.TurnAdd+8)
	var llama []map[int][2]float64
	runLlama := func() error {
		if o.LlamaBatchedBench == "" {
			return nil
		}
		fmt.Fprintf(log, "running llama-batched-bench (%d of 2)…\n", len(llama)+1)
		ll, err := runLlamaBatched(ctx, o, ctxLen)
		llama = append(llama, ll)
		return err
	}
	if err := runLlama(); err != nil {
		return nil, err
	}
	rep, err := batchedRuns(ctx, o, load, tok, ctxLen, log)
	if err != nil {
		return nil, err
	}
	if err := runLlama(); err != nil {
		return nil, err
	}
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if x, ok := meanLlama(llama, r.Concurrency); ok {
			r.LlamaPrefill, r.LlamaDecode = &x[0], &x[1]
			if x[1] > 0 {
				v := r.DecodeTokS / x[1]
				r.DecodeVsLlama = &v
			}
		}
	}
	return rep, nil
}

// batchedRuns loads the model and runs Orrery's tests; the scheduler and
// the weights are gone before it returns (llama-batched-bench then has
// the memory).
func batchedRuns(ctx context.Context, o BatchedOptions, load runner.LoadFunc, tok *tokenizer.Tokenizer, ctxLen int, log io.Writer) (*BatchedReport, error) {
	rank, err := load(ctx, o.Model, backend.Options{Threads: o.Threads, BatchSize: 512, ContextLen: ctxLen, Parallel: slices.Max(o.Conc),
		GPULayers: o.GPULayers, GPUSoftware: o.GPUSoftware}, nil)
	if err != nil {
		return nil, err
	}
	defer rank.Close()
	sc := &runner.Scheduler{E: &runner.Local{F: rank}, Tok: tok}
	sctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- sc.Run(sctx) }()
	defer func() { stop(); <-ran }() // runs before rank.Close
	rep := &BatchedReport{Model: o.Model, Threads: o.Threads, PP: o.PP, TG: o.TG, Offload: rank.Offload()}
	vocab := rank.Config().Vocab
	for _, b := range o.Conc {
		row := BatchedRow{Concurrency: b}
		var pre []float64
		for i := 0; i <= o.Repeat; i++ {
			p, d, err := batchOnce(ctx, sc, b, o.PP, o.TG, vocab, i)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				pre, row.DecodeRuns = append(pre, p), append(row.DecodeRuns, d)
			}
		}
		row.PrefillTokS, row.DecodeTokS = Mean(pre), Mean(row.DecodeRuns)
		fmt.Fprintf(log, "B=%d: prefill %.1f tok/s, decode %.2f tok/s (aggregate)\n", b, row.PrefillTokS, row.DecodeTokS)
		rep.Rows = append(rep.Rows, row)
	}
	if o.Turn > 0 {
		if err := turns(ctx, sc, o, vocab, rep); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "turn 1: %d tokens, first token in %.0f ms; turn 2: %d tokens (%d cached), %.0f ms\n",
			rep.TurnTokens[0], rep.Turn1Ms, rep.TurnTokens[1], rep.Turn2Cached, rep.Turn2Ms)
	}
	return rep, nil
}

// batchOnce runs b requests at once, each a distinct pp-token prompt and
// tg decoded tokens (after the first, which prefill gives): aggregate
// prefill tok/s (b·pp over the time until every request has its first
// token) and decode tok/s (b·tg over the time from then to the last).
func batchOnce(ctx context.Context, sc *runner.Scheduler, b, pp, tg, vocab, run int) (float64, float64, error) {
	start := time.Now()
	var mu sync.Mutex
	var lastFirst, lastEnd time.Time
	var wg sync.WaitGroup
	errs := make([]error, b)
	for k := range b {
		prompt := make([]int32, pp)
		for i := range prompt {
			prompt[i] = int32((i*7919 + k*104729 + run*31 + 300) % vocab)
		}
		req := &runnerapi.Request{PromptTokens: prompt, MaxTokens: tg + 1, IgnoreEOS: true, NoPromptCache: true}
		job := sc.Submit(ctx, req, prompt, "", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			_, errs[k] = job.Wait(func(runnerapi.Piece) error {
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if first && now.After(lastFirst) {
					lastFirst = now
				}
				first = false
				if now.After(lastEnd) {
					lastEnd = now
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	pre := float64(b*pp) / lastFirst.Sub(start).Seconds()
	dec := float64(b*tg) / lastEnd.Sub(lastFirst).Seconds()
	return pre, dec, nil
}

// turns times a conversation: turn 1's prompt from an empty cache, then
// turn 2 (turn 1, its answer and new tokens), which reuses turn 1's cache.
func turns(ctx context.Context, sc *runner.Scheduler, o BatchedOptions, vocab int, rep *BatchedReport) error {
	p1 := make([]int32, o.Turn)
	for i := range p1 {
		p1[i] = int32((i*6151 + 977) % vocab)
	}
	var answer []int32
	res1, err := sc.Submit(ctx, &runnerapi.Request{PromptTokens: p1, MaxTokens: o.TG, IgnoreEOS: true}, p1, "", nil).Wait(func(p runnerapi.Piece) error {
		if p.Token >= 0 {
			answer = append(answer, p.Token)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p2 := append(append(slices.Clone(p1), answer...), make([]int32, o.TurnAdd)...)
	for i := len(p2) - o.TurnAdd; i < len(p2); i++ {
		p2[i] = int32((i*4409 + 13) % vocab)
	}
	res2, err := sc.Submit(ctx, &runnerapi.Request{PromptTokens: p2, MaxTokens: 1}, p2, "", nil).Wait(func(runnerapi.Piece) error { return nil })
	if err != nil {
		return err
	}
	rep.TurnTokens = [2]int{len(p1), len(p2)}
	rep.Turn1Ms, rep.Turn2Ms = float64(res1.FirstTokenNs)/1e6, float64(res2.FirstTokenNs)/1e6
	rep.Turn2Cached = res2.CachedTokens
	return nil
}

// meanLlama is the mean S_PP and S_TG of the llama-batched-bench runs at
// concurrency b.
func meanLlama(runs []map[int][2]float64, b int) ([2]float64, bool) {
	var sum [2]float64
	for _, r := range runs {
		x, ok := r[b]
		if !ok {
			return sum, false
		}
		sum[0] += x[0]
		sum[1] += x[1]
	}
	return [2]float64{sum[0] / float64(len(runs)), sum[1] / float64(len(runs))}, len(runs) > 0
}

// runLlamaBatched runs llama-batched-bench with the same shapes: S_PP and
// S_TG (tok/s) by B.
func runLlamaBatched(ctx context.Context, o BatchedOptions, ctxLen int) (map[int][2]float64, error) {
	var npl []string
	for _, b := range o.Conc {
		npl = append(npl, strconv.Itoa(b))
	}
	cmd := exec.CommandContext(ctx, o.LlamaBatchedBench, "-m", o.Model, "-npp", strconv.Itoa(o.PP), "-ntg", strconv.Itoa(o.TG),
		"-npl", strings.Join(npl, ","), "-t", strconv.Itoa(o.Threads), "-c", strconv.Itoa(ctxLen), "-fa", "on")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("llama-batched-bench (%s; build it with scripts/llama-ref.sh): %w\n%s", o.LlamaBatchedBench, err, tail(stderr.String(), 2000))
	}
	return parseLlamaBatched(out)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// parseLlamaBatched reads llama-batched-bench's markdown table: for each
// row, B (column 3), S_PP (6) and S_TG (8).
func parseLlamaBatched(out []byte) (map[int][2]float64, error) {
	res := map[int][2]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		cols := strings.Split(strings.Trim(strings.TrimSpace(sc.Text()), "|"), "|")
		if len(cols) < 10 {
			continue
		}
		b, err1 := strconv.Atoi(strings.TrimSpace(cols[2]))
		spp, err2 := strconv.ParseFloat(strings.TrimSpace(cols[5]), 64)
		stg, err3 := strconv.ParseFloat(strings.TrimSpace(cols[7]), 64)
		if err1 == nil && err2 == nil && err3 == nil {
			res[b] = [2]float64{spp, stg}
		}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("llama-batched-bench printed no result rows:\n%s", tail(string(out), 2000))
	}
	return res, nil
}

// PrintBatched prints Batched's table.
func PrintBatched(w io.Writer, r *BatchedReport) {
	fmt.Fprintf(w, "%s, %d threads (%s), each request %d prompt + %d generated tokens\n", r.Model, r.Threads, r.Offload, r.PP, r.TG)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "B\tprefill tok/s\tdecode tok/s\tvs B=1\tllama prefill\tllama decode\tdecode vs llama\t")
	base := 0.0
	for _, row := range r.Rows {
		if base == 0 {
			base = row.DecodeTokS
		}
		opt := func(x *float64, f string) string {
			if x == nil {
				return "–"
			}
			return fmt.Sprintf(f, *x)
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.2f\t%.2f×\t%s\t%s\t%s\t\n", row.Concurrency, row.PrefillTokS, row.DecodeTokS, row.DecodeTokS/base,
			opt(row.LlamaPrefill, "%.1f"), opt(row.LlamaDecode, "%.2f"), opt(row.DecodeVsLlama, "%.2f×"))
	}
	tw.Flush()
	if r.Turn1Ms > 0 {
		fmt.Fprintf(w, "conversation: turn 1 (%d tokens) first token in %.0f ms; turn 2 (%d tokens, %d cached) in %.0f ms: %.3f× turn 1\n",
			r.TurnTokens[0], r.Turn1Ms, r.TurnTokens[1], r.Turn2Cached, r.Turn2Ms, r.Turn2Ms/r.Turn1Ms)
	}
}
