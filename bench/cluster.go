package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/chatstream"
)

// Report is what Cluster measured, as --json-out writes it.
type Report struct {
	Model         string                               `json:"model"`
	Runs          []Run                                `json:"runs"`
	Cluster       Snapshot                             `json:"cluster"`
	SystemMetrics map[string]map[string]MetricsSummary `json:"system_metrics"`
}

// Run is one measured run: Concurrency requests of PP prompt and TG
// generated tokens at once, on one placement.
type Run struct {
	Placement   string   `json:"placement"`
	Nodes       []string `json:"nodes"`
	InstanceID  string   `json:"instance_id"`
	PP          int      `json:"pp"`
	TG          int      `json:"tg"`
	Concurrency int      `json:"concurrency"`
	Repeat      int      `json:"repeat"`
	// Per-request means; GenThroughput is all generated tokens over the
	// run's wall time (the cluster's throughput under concurrency).
	PromptTokens     int                     `json:"prompt_tokens"`
	GenTokens        int                     `json:"gen_tokens"`
	PromptTPS        float64                 `json:"prompt_tps"`
	GenTPS           float64                 `json:"gen_tps"`
	GenThroughputTPS float64                 `json:"gen_throughput_tps"`
	TTFTMs           float64                 `json:"ttft_ms"`
	WallSeconds      float64                 `json:"wall_seconds"`
	EnergyJ          *float64                `json:"energy_j"`
	AvgWatts         *float64                `json:"avg_watts"`
	PeakMemory       map[string]state.Memory `json:"peak_memory"`
	TraceIDs         []string                `json:"trace_ids"`
	TraceID          string                  `json:"trace_id"`
	Errors           []string                `json:"errors,omitempty"`
	// Plan is the plan placed ("pipeline 2", "tensor 2", …) and
	// Predicted the cost model's prediction for it (nil when no node
	// had measured its speed).
	Plan      string                `json:"plan,omitempty"`
	Predicted *runnerapi.Prediction `json:"predicted,omitempty"`
}

// MetricsSummary is one metric of one node over the whole benchmark.
type MetricsSummary struct {
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Mean    float64 `json:"mean"`
	Samples int     `json:"samples"`
}

// Snapshot is the part of the state a benchmark result carries:
// identities, topology with link telemetry, memory and system.
type Snapshot struct {
	NodeIdentities    map[string]state.NodeIdentity `json:"nodeIdentities"`
	NodeLinkTelemetry map[string]state.NodeLinks    `json:"nodeLinkTelemetry"`
	NodeMemory        map[string]state.NodeMemory   `json:"nodeMemory"`
	NodeNetwork       map[string]state.NodeNetwork  `json:"nodeNetwork"`
	NodeSystem        map[string]state.NodeSystem   `json:"nodeSystem"`
	Topology          state.Topology                `json:"topology"`
}

func snapshotOf(st state.State) Snapshot {
	return Snapshot{NodeIdentities: st.NodeIdentities, NodeLinkTelemetry: st.NodeLinkTelemetry, NodeMemory: st.NodeMemory,
		NodeNetwork: st.NodeNetwork, NodeSystem: st.NodeSystem, Topology: st.Topology}
}

// Cluster benchmarks o.Model on the cluster c talks to: it places the
// model on each placement in turn (deleting its other instances first) and
// runs warmup and measured requests for every shape × concurrency. The
// report holds the runs done so far also when it returns an error.
func Cluster(ctx context.Context, c *client.Client, o Options) (*Report, error) {
	st, err := c.State(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the cluster's state: %w", err)
	}
	out := &Report{Model: o.Model, Cluster: snapshotOf(st), SystemMetrics: map[string]map[string]MetricsSummary{}}
	pv, err := c.Previews(ctx, o.Model, o.GPULayers)
	if err != nil {
		return out, fmt.Errorf("placement previews of %s: %w", o.Model, err)
	}
	sets, err := resolvePlacements(o.Placements, pv, st)
	if err != nil {
		return out, err
	}
	shapes := Shapes(o.PP, o.TG, o.Cartesian)
	w := o.Progress
	if w == nil {
		w = io.Discard
	}
	prog := &progress{w: w, total: len(sets) * len(shapes) * len(o.Conc) * o.Repeat, tty: o.TTY}

	samp := newSampler(c, o.MetricsInterval, !o.NoSystemMetrics)
	sctx, cancelSamp := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() { defer swg.Done(); samp.run(sctx) }()
	defer func() {
		cancelSamp()
		swg.Wait()
		if !o.NoSystemMetrics {
			out.SystemMetrics = samp.summary()
		}
	}()

	b := &benchmark{c: c, o: o, prog: prog, samp: samp, sizer: &promptSizer{c: c, model: o.Model}, out: out}
	for i, set := range sets {
		if err := b.placement(ctx, set, parOf(o.Placements, i), shapes); err != nil {
			return out, err
		}
	}
	prog.done()
	return out, nil
}

// benchmark is one Cluster call's state.
type benchmark struct {
	c     *client.Client
	o     Options
	prog  *progress
	samp  *sampler
	sizer *promptSizer
	out   *Report
}

// parOf is placement i's parallelism ("" when placements were not given).
func parOf(ps []Placement, i int) string {
	if i < len(ps) {
		return ps[i].Parallelism
	}
	return ""
}

// placement measures every shape and concurrency on one node set, split
// as par says.
func (b *benchmark) placement(ctx context.Context, set []string, par string, shapes [][2]int) error {
	o := b.o
	label := fmt.Sprintf("%d node(s): %s", len(set), strings.Join(shortAll(set), "+"))
	if par != "" {
		label = par + " " + label
	}
	inst, err := place(ctx, b.c, o, set, par, b.prog)
	if err != nil {
		return fmt.Errorf("place %s on %s: %w", o.Model, label, err)
	}
	var plan string
	var pred *runnerapi.Prediction
	if st, err := b.c.State(ctx); err == nil {
		if in, ok := st.Instances[inst]; ok && in.Prediction != nil {
			pred, plan = in.Prediction, in.Prediction.Plan
		}
	}
	for _, sh := range shapes {
		prompt, err := b.sizer.prompt(ctx, sh[0], o.Timeout)
		if err != nil {
			return fmt.Errorf("size a %d-token prompt: %w", sh[0], err)
		}
		for _, cc := range o.Conc {
			for w := 0; w < o.Warmup; w++ {
				b.prog.line(fmt.Sprintf("%s · pp %d tg %d ×%d · warmup %d/%d", label, sh[0], sh[1], cc, w+1, o.Warmup))
				batch(ctx, b.c, o, prompt, sh[1], cc)
			}
			for r := 0; r < o.Repeat; r++ {
				b.prog.step(fmt.Sprintf("%s · pp %d tg %d ×%d · run %d/%d", label, sh[0], sh[1], cc, r+1, o.Repeat))
				b.samp.sampleMemory(ctx)
				start := time.Now()
				res := batch(ctx, b.c, o, prompt, sh[1], cc)
				end := time.Now()
				b.samp.sampleMemory(ctx)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				run := summarize(res, start, end)
				run.Placement, run.Nodes, run.InstanceID = label, set, inst
				run.Plan, run.Predicted = plan, pred
				run.PP, run.TG, run.Concurrency, run.Repeat = sh[0], sh[1], cc, r
				run.PeakMemory = b.samp.peakMemory(set, start, end)
				if !o.NoSystemMetrics {
					run.EnergyJ, run.AvgWatts = b.samp.energy(set, start, end)
				}
				b.out.Runs = append(b.out.Runs, run)
			}
		}
	}
	return nil
}

// resolvePlacements turns counts into the previews' node sets, and id
// prefixes into node ids; no placements means every count that fits.
func resolvePlacements(ps []Placement, pv api.PreviewsResponse, st state.State) ([][]string, error) {
	byCount := map[int][]string{}
	var fitting []int
	for _, p := range pv.Previews {
		var ids []string
		for _, r := range p.Ranks {
			ids = append(ids, r.NodeID)
		}
		if p.Fits {
			byCount[p.Nodes] = ids
			fitting = append(fitting, p.Nodes)
		} else if p.Error != "" {
			byCount[-p.Nodes] = []string{p.Error}
		}
	}
	if len(ps) == 0 {
		if len(fitting) == 0 {
			return nil, errors.New("the model fits on no placement (see GET /instance/previews)")
		}
		for _, n := range fitting {
			ps = append(ps, Placement{Count: n})
		}
	}
	var out [][]string
	for _, p := range ps {
		if p.Count > 0 && p.Parallelism != "" {
			// The previews list nodes best first: the largest one's.
			var all []string
			for _, r := range pv.Previews[len(pv.Previews)-1:] {
				for _, rk := range r.Ranks {
					all = append(all, rk.NodeID)
				}
			}
			if len(all) < p.Count {
				return nil, fmt.Errorf("placement %s: the cluster has %d node(s)", p, len(all))
			}
			out = append(out, all[:p.Count])
			continue
		}
		if p.Count > 0 {
			ids, ok := byCount[p.Count]
			if !ok {
				why := "no such placement"
				if e, bad := byCount[-p.Count]; bad {
					why = e[0]
				}
				return nil, fmt.Errorf("placement on %d node(s): %s", p.Count, why)
			}
			out = append(out, ids)
			continue
		}
		var ids []string
		for _, pre := range p.Nodes {
			var match []string
			for id := range st.NodeIdentities {
				if strings.HasPrefix(id, pre) {
					match = append(match, id)
				}
			}
			if len(match) != 1 {
				return nil, fmt.Errorf("node %q matches %d nodes", pre, len(match))
			}
			ids = append(ids, match[0])
		}
		out = append(out, ids)
	}
	return out, nil
}

// promptSizer makes prompts of a given token count for this model: it
// measures the chat template's overhead and the tokens per word with two
// one-token requests, once.
type promptSizer struct {
	c                  *client.Client
	model              string
	measured           bool
	overhead, perWords float64
}

const benchWord = "orrery "

func (p *promptSizer) tokens(ctx context.Context, words int, timeout time.Duration) (int, error) {
	r := request(ctx, p.c, p.model, strings.Repeat(benchWord, words), 1, timeout)
	return r.PromptTokens, r.Err
}

func (p *promptSizer) prompt(ctx context.Context, pp int, timeout time.Duration) (string, error) {
	if !p.measured {
		a, err := p.tokens(ctx, 16, timeout)
		if err != nil {
			return "", err
		}
		b, err := p.tokens(ctx, 64, timeout)
		if err != nil {
			return "", err
		}
		p.perWords = float64(b-a) / 48
		p.overhead = float64(a) - 16*p.perWords
		if p.perWords <= 0 {
			return "", fmt.Errorf("prompt length does not grow with words (%d and %d tokens)", a, b)
		}
		p.measured = true
	}
	words := int(math.Round((float64(pp) - p.overhead) / p.perWords))
	return strings.Repeat(benchWord, max(words, 1)), nil
}

// result is one request's figures.
type result struct {
	PromptTokens, GenTokens int
	PrefillTPS, DecodeTPS   float64
	TTFT                    time.Duration
	TraceID                 string
	Err                     error
}

// request streams one completion: greedy, ignore_eos, exactly tg tokens.
func request(ctx context.Context, c *client.Client, model, prompt string, tg int, timeout time.Duration) result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	zero, noCache := 0.0, false
	// The same prompt every run: the prefix cache would serve it.
	req := client.ChatRequest{Model: model, MaxTokens: tg, Temperature: &zero, IgnoreEOS: true, CachePrompt: &noCache,
		Messages: []client.ChatMessage{{Role: "user", Content: prompt}}}
	var res result
	start := time.Now()
	res.TraceID, res.Err = c.ChatStream(ctx, req, func(c chatstream.Chunk) {
		if res.TTFT == 0 && c.Content() != "" {
			res.TTFT = time.Since(start)
		}
		if c.Usage != nil {
			res.PromptTokens, res.GenTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
		if c.Orrery != nil {
			res.PrefillTPS, res.DecodeTPS = c.Orrery.PrefillTokPerSec, c.Orrery.DecodeTokPerSec
		}
	})
	return res
}

// batch runs n requests at once.
func batch(ctx context.Context, c *client.Client, o Options, prompt string, tg, n int) []result {
	res := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = request(ctx, c, o.Model, prompt, tg, o.Timeout)
		}()
	}
	wg.Wait()
	return res
}

// summarize averages the successful requests of one run.
func summarize(res []result, start, end time.Time) Run {
	run := Run{WallSeconds: round3(end.Sub(start).Seconds()), TraceIDs: []string{}}
	ok := 0
	var ttft float64
	for _, r := range res {
		if r.TraceID != "" {
			run.TraceIDs = append(run.TraceIDs, r.TraceID)
		}
		if r.Err != nil {
			run.Errors = append(run.Errors, r.Err.Error())
			continue
		}
		ok++
		run.PromptTokens += r.PromptTokens
		run.GenTokens += r.GenTokens
		run.PromptTPS += r.PrefillTPS
		run.GenTPS += r.DecodeTPS
		ttft += float64(r.TTFT.Microseconds()) / 1e3
	}
	if len(run.TraceIDs) > 0 {
		run.TraceID = run.TraceIDs[0]
	}
	if ok > 0 {
		run.PromptTokens /= ok
		run.PromptTPS = round3(run.PromptTPS / float64(ok))
		run.GenTPS = round3(run.GenTPS / float64(ok))
		run.TTFTMs = round3(ttft / float64(ok))
		if s := end.Sub(start).Seconds(); s > 0 {
			run.GenThroughputTPS = round3(float64(run.GenTokens) / s)
		}
		run.GenTokens /= ok
	}
	return run
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
