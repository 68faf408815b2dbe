package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// EngineOptions configures Engine.
type EngineOptions struct {
	// Model is the GGUF file to load.
	Model   string
	Threads int
	// PP is the prefill test's prompt length, TG the decode test's tokens
	// (0 skips a test); each runs Repeat times (after one warmup).
	PP, TG, Repeat int
	// Bandwidth measures memory read bandwidth first.
	Bandwidth        bool
	NoFlashAttention bool
	NoRepack         bool
	// GPULayers and GPUSoftware say what goes on a GPU (backend.Options;
	// the zero value: nothing).
	GPULayers   runnerapi.GPULayers
	GPUSoftware bool
	// LlamaBench, when set, is llama.cpp's llama-bench binary, run on the
	// same file before and after Orrery's runs for comparison.
	LlamaBench string
}

// EngineReport is what Engine measured; it is engine-bench's --json.
type EngineReport struct {
	DecodeBoundTokPerSec float64     `json:"decodeBoundTokPerSec"`
	Model                string      `json:"model"`
	ReadBandwidthGBps    float64     `json:"readBandwidthGBps"`
	Rows                 []EngineRow `json:"rows"`
	Threads              int         `json:"threads"`
	VsLlamaBench         []VsRow     `json:"vsLlamaBench"`
	WeightBytes          int64       `json:"weightBytes"`
	// ActiveBytes is what one decoded token reads (model.ActiveBytes):
	// the weights, less the experts a mixture of experts leaves unused.
	// The decode bound is bandwidth / ActiveBytes.
	ActiveBytes int64 `json:"activeBytesPerToken"`
	// Offload is where the blocks went, GPU or CPU.
	Offload runnerapi.Offload `json:"offload"`
}

// EngineRow is one test (pp or tg) with tracing off or on.
type EngineRow struct {
	Test     string    `json:"test"`
	Traced   bool      `json:"traced"`
	Tokens   int       `json:"tokens"`
	TokPerS  []float64 `json:"tokPerSec"`
	Mean     float64   `json:"meanTokPerSec"`
	SD       float64   `json:"sdTokPerSec"`
	TTFTMsMu float64   `json:"ttftMs,omitempty"`
}

// VsRow is one test side by side with llama-bench.
type VsRow struct {
	Test      string    `json:"test"`
	Orrery    float64   `json:"orreryTokPerSec"`
	Llama     float64   `json:"llamaBenchTokPerSec"`
	LlamaRuns []float64 `json:"llamaBenchRuns"`
	Ratio     float64   `json:"ratio"`
}

// Engine loads o.Model with load in this process and times prefill and
// decode, alternating tracing off and on, like llama-bench. Progress goes
// to log.
func Engine(ctx context.Context, o EngineOptions, load runner.LoadFunc, log io.Writer) (*EngineReport, error) {
	f, err := gguf.ReadFile(o.Model)
	var cfg model.Config
	if err == nil {
		cfg, err = model.FromGGUF(f)
	}
	var tok *tokenizer.Tokenizer
	if err == nil {
		tok, err = tokenizer.New(f)
	}
	if err != nil {
		return nil, err
	}
	rep := &EngineReport{Model: o.Model, Threads: o.Threads}
	for _, t := range f.Tensors {
		rep.WeightBytes += int64(t.Size)
	}
	rep.ActiveBytes = int64(model.ActiveBytes(f, cfg))
	// Measured before the model is loaded: 1 GiB more resident while the
	// weights are would only add noise.
	if o.Bandwidth {
		rep.ReadBandwidthGBps = readBandwidth(o.Threads)
	}
	lb := llamaBenchRun{bin: o.LlamaBench, model: o.Model, pp: o.PP, tg: o.TG, threads: o.Threads, repeat: o.Repeat, flashAttn: !o.NoFlashAttention}
	var llamaRuns []map[string]float64
	if o.LlamaBench != "" {
		fmt.Fprintf(log, "running llama-bench (1 of 2)…\n")
		r, err := lb.run(ctx)
		if err != nil {
			return nil, err
		}
		llamaRuns = append(llamaRuns, r)
	}
	if rep.Rows, rep.Offload, err = engineRuns(ctx, o, load, tok, rep.WeightBytes, log); err != nil {
		return nil, err
	}
	if o.LlamaBench != "" {
		fmt.Fprintf(log, "running llama-bench (2 of 2)…\n")
		r, err := lb.run(ctx)
		if err != nil {
			return nil, err
		}
		llamaRuns = append(llamaRuns, r)
		rep.VsLlamaBench = vsRows(rep.Rows, llamaRuns)
	}
	rep.DecodeBoundTokPerSec = rep.ReadBandwidthGBps * 1e9 / float64(rep.ActiveBytes)
	return rep, nil
}

// engineRuns loads the model and runs the tests; the model is closed
// before it returns, so that both engines' weights are never resident
// together.
func engineRuns(ctx context.Context, o EngineOptions, load runner.LoadFunc, tok *tokenizer.Tokenizer, weightBytes int64, log io.Writer) ([]EngineRow, runnerapi.Offload, error) {
	start := time.Now()
	rank, err := load(ctx, o.Model, backend.Options{Threads: o.Threads, BatchSize: max(o.PP, 1), ContextLen: max(o.PP, o.TG) + 8,
		NoFlashAttention: o.NoFlashAttention, NoRepack: o.NoRepack, GPULayers: o.GPULayers, GPUSoftware: o.GPUSoftware}, nil)
	if err != nil {
		return nil, runnerapi.Offload{}, err
	}
	defer rank.Close()
	off := rank.Offload()
	fmt.Fprintf(log, "loaded %s in %.1f s (%s of weights, %d threads; %s)\n", o.Model, time.Since(start).Seconds(), HumanBytes(weightBytes), o.Threads, off)
	t := &engineTests{g: &runner.Generator{M: &runner.Local{F: rank}, Tok: tok}, vocab: rank.Config().Vocab,
		rows: map[string]*EngineRow{}, ttft: map[bool][]float64{}}
	// Runs alternate untraced and traced, pp and tg, so that the VM's
	// drift affects both sides alike; run 0 of each warms up.
	for i := 0; i <= o.Repeat; i++ {
		for _, traced := range []bool{false, true} {
			if err := t.once(ctx, o, i, traced); err != nil {
				return nil, off, err
			}
		}
	}
	var out []EngineRow
	for _, k := range t.order {
		r := t.rows[k]
		r.Mean, r.SD = meanSD(r.TokPerS)
		if strings.HasPrefix(r.Test, "pp") {
			r.TTFTMsMu, _ = meanSD(t.ttft[r.Traced])
		}
		out = append(out, *r)
	}
	return out, off, nil
}

// engineTests collects the rows of engineRuns.
type engineTests struct {
	g     *runner.Generator
	vocab int
	rows  map[string]*EngineRow
	order []string
	ttft  map[bool][]float64
}

func (t *engineTests) row(test string, traced bool, tokens int) *EngineRow {
	key := fmt.Sprint(test, traced)
	if t.rows[key] == nil {
		t.rows[key] = &EngineRow{Test: test, Traced: traced, Tokens: tokens}
		t.order = append(t.order, key)
	}
	return t.rows[key]
}

// once runs the pp and tg tests once; run 0 is not recorded.
func (t *engineTests) once(ctx context.Context, o EngineOptions, i int, traced bool) error {
	noop := func(runnerapi.Piece) error { return nil }
	if o.PP > 0 {
		prompt := make([]int32, o.PP)
		for k := range prompt {
			prompt[k] = int32((k*7919 + i*31 + 300) % t.vocab)
		}
		res, err := t.g.Generate(ctx, &runnerapi.Request{MaxTokens: 1, IgnoreEOS: true}, prompt, recorder(traced), noop)
		if err != nil {
			return err
		}
		r := t.row(fmt.Sprintf("pp%d", o.PP), traced, o.PP)
		if i > 0 {
			r.TokPerS = append(r.TokPerS, res.PrefillTokPerSec())
			t.ttft[traced] = append(t.ttft[traced], float64(res.FirstTokenNs)/1e6)
		}
	}
	if o.TG > 0 {
		res, err := t.g.Generate(ctx, &runnerapi.Request{MaxTokens: o.TG + 1, IgnoreEOS: true}, []int32{1}, recorder(traced), noop)
		if err != nil {
			return err
		}
		r := t.row(fmt.Sprintf("tg%d", o.TG), traced, o.TG)
		if i > 0 {
			r.TokPerS = append(r.TokPerS, res.DecodeTokPerSec())
		}
	}
	return nil
}

// vsRows pairs the untraced rows with llama-bench's runs.
func vsRows(rows []EngineRow, llamaRuns []map[string]float64) []VsRow {
	var vs []VsRow
	for _, r := range rows {
		if r.Traced {
			continue
		}
		v := VsRow{Test: r.Test, Orrery: r.Mean}
		for _, run := range llamaRuns {
			v.LlamaRuns = append(v.LlamaRuns, run[r.Test])
		}
		v.Llama = Mean(v.LlamaRuns)
		if v.Llama > 0 {
			v.Ratio = v.Orrery / v.Llama
		}
		vs = append(vs, v)
	}
	return vs
}

func recorder(on bool) *trace.Recorder {
	if !on {
		return nil
	}
	return trace.NewRecorder(0, "bench", trace.Options{})
}

func meanSD(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	m := Mean(xs)
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
	sink = sums // keep the sums alive
	return best
}

// sink keeps readBandwidth's sums from being optimized away.
var sink []uint64

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
