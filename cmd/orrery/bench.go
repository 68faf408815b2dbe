package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/chatstream"
)

// orrery bench measures a running cluster through its API: for each
// placement of a model, prefill and decode speed, time to first token,
// peak memory per node and energy (from the nodes' power samples, over the
// inference windows), with the trace of every run.

const benchUsage = `usage: orrery bench --model M [flags]

Places the model on each placement in turn (deleting its other instances
first), runs warmup and measured requests for every pp × tg × concurrency,
and prints a summary table; --json-out writes every run, a cluster snapshot
and per-node system metrics.

`

type benchOpts struct {
	API, Model, JSONOut string
	PP, TG, Conc        []int
	Cartesian           bool
	Warmup, Repeat      int
	Placements          []benchPlacement
	NoSystemMetrics     bool
	MetricsInterval     time.Duration
	Timeout             time.Duration
}

// benchPlacement is a node count (from the placement previews) or an
// explicit node set.
type benchPlacement struct {
	Count int
	Nodes []string
}

func (p benchPlacement) String() string {
	if p.Count > 0 {
		return fmt.Sprintf("%d node(s)", p.Count)
	}
	return strings.Join(shortAll(p.Nodes), "+")
}

func shortAll(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = short(id)
	}
	return out
}

// parseIntList reads "128,512" (each ≥ 1).
func parseIntList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--%s %q: want a comma-separated list of integers ≥ 1", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// parsePlacements reads "1,2,3" (node counts) and "ID+ID,ID" (node sets,
// ids or unique id prefixes, resolved later).
func parsePlacements(s string) ([]benchPlacement, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []benchPlacement
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if n, err := strconv.Atoi(f); err == nil {
			if n < 1 {
				return nil, fmt.Errorf("--placements: node count %d: want ≥ 1", n)
			}
			out = append(out, benchPlacement{Count: n})
			continue
		}
		var nodes []string
		for _, id := range strings.Split(f, "+") {
			if id = strings.TrimSpace(id); id == "" {
				return nil, fmt.Errorf("--placements %q: empty node id", s)
			}
			nodes = append(nodes, id)
		}
		out = append(out, benchPlacement{Nodes: nodes})
	}
	return out, nil
}

// benchShapes pairs pp and tg lists of equal length, else (or with
// cartesian) takes their product.
func benchShapes(pp, tg []int, cartesian bool) [][2]int {
	var out [][2]int
	if len(pp) == len(tg) && !cartesian {
		for i := range pp {
			out = append(out, [2]int{pp[i], tg[i]})
		}
		return out
	}
	for _, p := range pp {
		for _, t := range tg {
			out = append(out, [2]int{p, t})
		}
	}
	return out
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := benchOpts{}
	fs := flag.NewFlagSet("orrery bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	fs.StringVar(&o.API, "api", "http://127.0.0.1:52416", "a node's API URL")
	fs.StringVar(&o.Model, "model", "", "the model id (as in /v1/models)")
	pp := fs.String("pp", "128", "prompt lengths in tokens, comma-separated")
	tg := fs.String("tg", "64", "tokens to generate, comma-separated (paired with --pp when the lists are as long, else every combination)")
	fs.BoolVar(&o.Cartesian, "cartesian", false, "every pp × tg combination even when the lists are as long")
	conc := fs.String("concurrency", "1", "concurrent requests per run, comma-separated")
	fs.IntVar(&o.Warmup, "warmup", 1, "unmeasured runs before each pp/tg/concurrency")
	fs.IntVar(&o.Repeat, "repeat", 3, "measured runs of each pp/tg/concurrency")
	placements := fs.String("placements", "", "node counts (1,2,3) or node sets (ID+ID,ID; ids or prefixes); default: every count that fits")
	fs.StringVar(&o.JSONOut, "json-out", "", "write runs, cluster snapshot and system metrics as JSON to this file")
	fs.BoolVar(&o.NoSystemMetrics, "no-system-metrics", false, "do not sample GPU, temperature and power (energy is then null)")
	fs.DurationVar(&o.MetricsInterval, "metrics-interval", time.Second, "system metrics sampling period")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "limit for one request, and for loading one placement")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	var err error
	for _, l := range []struct {
		name, s string
		dst     *[]int
	}{{"pp", *pp, &o.PP}, {"tg", *tg, &o.TG}, {"concurrency", *conc, &o.Conc}} {
		if *l.dst, err = parseIntList(l.name, l.s); err != nil {
			fmt.Fprintf(stderr, "orrery bench: %v\n", err)
			return 2
		}
	}
	if o.Placements, err = parsePlacements(*placements); err != nil {
		fmt.Fprintf(stderr, "orrery bench: %v\n", err)
		return 2
	}
	switch {
	case o.Model == "":
		fmt.Fprintln(stderr, "orrery bench: --model is required (see GET /v1/models)")
		return 2
	case o.Warmup < 0 || o.Repeat < 1:
		fmt.Fprintln(stderr, "orrery bench: want --warmup ≥ 0 and --repeat ≥ 1")
		return 2
	case o.MetricsInterval < 100*time.Millisecond:
		fmt.Fprintln(stderr, "orrery bench: --metrics-interval must be ≥ 100ms")
		return 2
	}
	o.API = strings.TrimRight(o.API, "/")
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := bench(ctx, o, stderr)
	if out != nil && len(out.Runs) > 0 {
		printBenchTable(stdout, out)
		if o.JSONOut != "" {
			if werr := writeJSONFile(o.JSONOut, out); werr != nil {
				fmt.Fprintf(stderr, "orrery bench: %v\n", werr)
				return 1
			}
			fmt.Fprintf(stderr, "orrery bench: wrote %s\n", o.JSONOut)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery bench: %v\n", err)
		return 1
	}
	return 0
}

// benchOutput is the JSON of --json-out.
type benchOutput struct {
	Model         string                                    `json:"model"`
	Runs          []benchRun                                `json:"runs"`
	Cluster       map[string]any                            `json:"cluster"`
	SystemMetrics map[string]map[string]benchMetricsSummary `json:"system_metrics"`
}

type benchRun struct {
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
}

type benchMetricsSummary struct {
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Mean    float64 `json:"mean"`
	Samples int     `json:"samples"`
}

// benchClient wraps the API calls bench makes.
type benchClient struct {
	api  string
	http *http.Client
}

func (c benchClient) get(ctx context.Context, path string, v any) error {
	return apiGet(ctx, c.http, c.api, path, v)
}

func (c benchClient) send(ctx context.Context, method, path string, body any, want int, v any) error {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, apiMaxResponse))
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if v != nil {
		return json.Unmarshal(b, v)
	}
	return nil
}

type previewsResp struct {
	Layers   int            `json:"layers"`
	Previews []benchPreview `json:"previews"`
}

type benchPreview struct {
	Nodes int         `json:"nodes"`
	Ranks []benchRank `json:"ranks"`
	Fits  bool        `json:"fits"`
	Error string      `json:"error"`
}

type benchRank struct {
	NodeID string `json:"nodeId"`
}

func bench(ctx context.Context, o benchOpts, stderr io.Writer) (*benchOutput, error) {
	c := benchClient{api: o.API, http: &http.Client{}}
	var st state.State
	if err := c.get(ctx, "/state", &st); err != nil {
		return nil, fmt.Errorf("read the cluster's state: %w", err)
	}
	out := &benchOutput{Model: o.Model, Cluster: clusterSnapshot(st), SystemMetrics: map[string]map[string]benchMetricsSummary{}}
	var pv previewsResp
	if err := c.get(ctx, "/instance/previews?model="+urlQuery(o.Model), &pv); err != nil {
		return out, fmt.Errorf("placement previews of %s: %w", o.Model, err)
	}
	sets, err := resolvePlacements(o.Placements, pv, st)
	if err != nil {
		return out, err
	}
	shapes := benchShapes(o.PP, o.TG, o.Cartesian)
	total := len(sets) * len(shapes) * len(o.Conc) * o.Repeat
	prog := &benchProgress{w: stderr, total: total, tty: isTerminal(stderr)}

	samp := newBenchSampler(c, o.MetricsInterval, !o.NoSystemMetrics)
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

	sizer := &promptSizer{c: c, model: o.Model}
	for _, set := range sets {
		label := fmt.Sprintf("%d node(s): %s", len(set), strings.Join(shortAll(set), "+"))
		inst, err := benchPlace(ctx, c, o, set, prog)
		if err != nil {
			return out, fmt.Errorf("place %s on %s: %w", o.Model, label, err)
		}
		for _, sh := range shapes {
			prompt, err := sizer.prompt(ctx, sh[0], o.Timeout)
			if err != nil {
				return out, fmt.Errorf("size a %d-token prompt: %w", sh[0], err)
			}
			for _, cc := range o.Conc {
				for w := 0; w < o.Warmup; w++ {
					prog.line(fmt.Sprintf("%s · pp %d tg %d ×%d · warmup %d/%d", label, sh[0], sh[1], cc, w+1, o.Warmup))
					benchBatch(ctx, c, o, prompt, sh[1], cc)
				}
				for r := 0; r < o.Repeat; r++ {
					prog.step(fmt.Sprintf("%s · pp %d tg %d ×%d · run %d/%d", label, sh[0], sh[1], cc, r+1, o.Repeat))
					samp.sampleMemory(ctx)
					start := time.Now()
					res := benchBatch(ctx, c, o, prompt, sh[1], cc)
					end := time.Now()
					samp.sampleMemory(ctx)
					if ctx.Err() != nil {
						return out, ctx.Err()
					}
					run := summarizeBatch(res, start, end)
					run.Placement, run.Nodes, run.InstanceID = label, set, inst
					run.PP, run.TG, run.Concurrency, run.Repeat = sh[0], sh[1], cc, r
					run.PeakMemory = samp.peakMemory(set, start, end)
					if !o.NoSystemMetrics {
						run.EnergyJ, run.AvgWatts = samp.energy(set, start, end)
					}
					out.Runs = append(out.Runs, run)
				}
			}
		}
	}
	prog.done()
	return out, nil
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "%20", "#", "%23", "?", "%3F").Replace(s)
}

// resolvePlacements turns counts into the previews' node sets, and id
// prefixes into node ids; no placements means every count that fits.
func resolvePlacements(ps []benchPlacement, pv previewsResp, st state.State) ([][]string, error) {
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
			ps = append(ps, benchPlacement{Count: n})
		}
	}
	var out [][]string
	for _, p := range ps {
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

// benchPlace deletes the model's instances, places it on nodes and waits
// until every runner is ready, showing load progress.
func benchPlace(ctx context.Context, c benchClient, o benchOpts, nodes []string, prog *benchProgress) (string, error) {
	var st state.State
	if err := c.get(ctx, "/state", &st); err != nil {
		return "", err
	}
	var deleted []string
	for id, in := range st.Instances {
		if in.ModelID == o.Model {
			if err := c.send(ctx, http.MethodDelete, "/instance/"+id, nil, http.StatusOK, nil); err != nil {
				return "", fmt.Errorf("delete the earlier instance %s: %w", id, err)
			}
			deleted = append(deleted, id)
		}
	}
	// The state this node serves learns of changes a moment later; the
	// deleted instances' memory must be free before placing anew.
	if err := benchWaitState(ctx, c, 30*time.Second, func(st state.State) bool {
		for _, id := range deleted {
			if _, ok := st.Instances[id]; ok {
				return false
			}
		}
		return true
	}); err != nil {
		return "", fmt.Errorf("wait for the earlier instances to go: %w", err)
	}
	var pr struct {
		Instance state.Instance `json:"instance"`
	}
	if err := c.send(ctx, http.MethodPost, "/instance", map[string]any{"model": o.Model, "nodes": nodes}, http.StatusCreated, &pr); err != nil {
		return "", err
	}
	id := pr.Instance.InstanceID
	deadline := time.Now().Add(o.Timeout)
	seen := false
	for {
		if err := c.get(ctx, "/state", &st); err != nil {
			return id, err
		}
		in, ok := st.Instances[id]
		if !ok && seen {
			return id, fmt.Errorf("instance %s is gone", id)
		}
		if !ok {
			// Not yet replicated to the node bench asks.
			if time.Now().After(deadline) {
				return id, fmt.Errorf("instance %s never appeared in the state", id)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		seen = true
		if in.Status == "Failed" {
			return id, fmt.Errorf("instance %s failed: %s", id, in.Error)
		}
		ready, loaded, layers := 0, 0, 0
		for _, r := range st.Runners {
			if r.InstanceID != id {
				continue
			}
			switch r.Status {
			case "Ready", "Running":
				ready++
			case "Failed":
				return id, fmt.Errorf("runner %s failed: %s", r.RunnerID, r.Error)
			}
			loaded += r.LayersLoaded
			layers += r.TotalLayers
		}
		if ready == len(in.Ranks) {
			return id, nil
		}
		prog.line(fmt.Sprintf("loading %s on %d node(s): %d/%d runners ready, %d/%d layers", o.Model, len(nodes), ready, len(in.Ranks), loaded, layers))
		if time.Now().After(deadline) {
			return id, fmt.Errorf("instance %s not ready within %v", id, o.Timeout)
		}
		select {
		case <-ctx.Done():
			return id, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// benchWaitState polls the state until cond holds.
func benchWaitState(ctx context.Context, c benchClient, limit time.Duration, cond func(state.State) bool) error {
	deadline := time.Now().Add(limit)
	for {
		var st state.State
		if err := c.get(ctx, "/state", &st); err != nil {
			return err
		}
		if cond(st) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// promptSizer makes prompts of a given token count for this model: it
// measures the chat template's overhead and the tokens per word with two
// one-token requests, once.
type promptSizer struct {
	c                  benchClient
	model              string
	measured           bool
	overhead, perWords float64
}

const benchWord = "orrery "

func (p *promptSizer) tokens(ctx context.Context, words int, timeout time.Duration) (int, error) {
	r := benchRequest(ctx, p.c, p.model, strings.Repeat(benchWord, words), 1, timeout)
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

// benchResult is one request's figures.
type benchResult struct {
	PromptTokens, GenTokens int
	PrefillTPS, DecodeTPS   float64
	TTFT                    time.Duration
	TraceID                 string
	Err                     error
}

// benchRequest streams one completion: greedy, ignore_eos, exactly tg
// tokens.
func benchRequest(ctx context.Context, c benchClient, model, prompt string, tg int, timeout time.Duration) benchResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": model, "stream": true, "max_tokens": tg, "temperature": 0,
		"ignore_eos": true, "messages": []any{map[string]string{"role": "user", "content": prompt}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.api+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return benchResult{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return benchResult{Err: err}
	}
	defer resp.Body.Close()
	res := benchResult{TraceID: resp.Header.Get("X-Orrery-Trace-Id")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		res.Err = fmt.Errorf("chat: %s %s", resp.Status, strings.TrimSpace(string(b)))
		return res
	}
	err = chatstream.Read(resp.Body, func(c chatstream.Chunk) {
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
	res.Err = err
	return res
}

// benchBatch runs n requests at once.
func benchBatch(ctx context.Context, c benchClient, o benchOpts, prompt string, tg, n int) []benchResult {
	res := make([]benchResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = benchRequest(ctx, c, o.Model, prompt, tg, o.Timeout)
		}()
	}
	wg.Wait()
	return res
}

// summarizeBatch averages the successful requests of one run.
func summarizeBatch(res []benchResult, start, end time.Time) benchRun {
	run := benchRun{WallSeconds: round3(end.Sub(start).Seconds()), TraceIDs: []string{}}
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

// clusterSnapshot is the part of the state a benchmark result carries:
// identities, topology with link telemetry, memory and system.
func clusterSnapshot(st state.State) map[string]any {
	return map[string]any{
		"nodeIdentities":    st.NodeIdentities,
		"topology":          st.Topology,
		"nodeLinkTelemetry": st.NodeLinkTelemetry,
		"nodeMemory":        st.NodeMemory,
		"nodeSystem":        st.NodeSystem,
		"nodeNetwork":       st.NodeNetwork,
	}
}

// benchSampler polls the cluster's memory (always: peak memory) and system
// metrics (unless off) every interval, stamping samples with this
// machine's clock, which the run windows use too.
type benchSampler struct {
	c        benchClient
	interval time.Duration
	system   bool

	mu     sync.Mutex
	mem    map[string][]memPoint
	sys    map[string][]state.NodeSystem
	power  map[string][]state.PowerSample
	lastAt map[string]time.Time // last sampledAt seen per node
}

type memPoint struct {
	t    time.Time
	used uint64
}

func newBenchSampler(c benchClient, interval time.Duration, system bool) *benchSampler {
	return &benchSampler{c: c, interval: interval, system: system, mem: map[string][]memPoint{},
		sys: map[string][]state.NodeSystem{}, power: map[string][]state.PowerSample{}, lastAt: map[string]time.Time{}}
}

func (s *benchSampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *benchSampler) sample(ctx context.Context) {
	s.sampleMemory(ctx)
	if s.system {
		s.sampleSystem(ctx)
	}
}

func (s *benchSampler) sampleMemory(ctx context.Context) {
	now := time.Now()
	var mem map[string]state.NodeMemory
	if err := s.c.get(ctx, "/state/nodeMemory", &mem); err == nil {
		s.mu.Lock()
		for id, m := range mem {
			if m.RAMTotal != nil && m.RAMAvailable != nil {
				s.mem[id] = append(s.mem[id], memPoint{now, m.RAMTotal.InBytes - min(m.RAMAvailable.InBytes, m.RAMTotal.InBytes)})
			}
		}
		s.mu.Unlock()
	}
}

func (s *benchSampler) sampleSystem(ctx context.Context) {
	now := time.Now()
	var sys map[string]state.NodeSystem
	if err := s.c.get(ctx, "/state/nodeSystem", &sys); err == nil {
		s.mu.Lock()
		for id, v := range sys {
			if v.SampledAt.Equal(s.lastAt[id]) {
				continue // no new reading since the last poll
			}
			s.lastAt[id] = v.SampledAt
			s.sys[id] = append(s.sys[id], v)
			s.power[id] = append(s.power[id], state.PowerSample{T: now, W: v.SysPower})
		}
		s.mu.Unlock()
	}
}

// peakMemory is the most memory each node used during [a, b]: the
// samples inside it and the nearest one on either side (bench samples right
// before and after each run, so short runs are bracketed).
func (s *benchSampler) peakMemory(nodes []string, a, b time.Time) map[string]state.Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]state.Memory{}
	for _, id := range nodes {
		var peak uint64
		seen := false
		pts := s.mem[id]
		for i, p := range pts {
			before := !p.t.After(a) && (i+1 == len(pts) || pts[i+1].t.After(a))
			inside := p.t.After(a) && !p.t.After(b)
			after := p.t.After(b) && (i == 0 || !pts[i-1].t.After(b))
			if before || inside || after {
				peak = max(peak, p.used)
				seen = true
			}
		}
		if seen {
			out[id] = state.Memory{InBytes: peak}
		}
	}
	return out
}

// energy is the nodes' energy over [a, b] and its mean power; nil unless
// every node's power is known.
func (s *benchSampler) energy(nodes []string, a, b time.Time) (j, w *float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	joules, watts, ok := state.NodesEnergy(nodes, func(id string) []state.PowerSample { return s.power[id] }, a, b)
	if !ok {
		return nil, nil
	}
	joules, watts = round3(joules), round3(watts)
	return &joules, &watts
}

// summary is min/max/mean per node of every metric that had a value.
func (s *benchSampler) summary() map[string]map[string]benchMetricsSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]benchMetricsSummary{}
	for id, vs := range s.sys {
		m := map[string]benchMetricsSummary{}
		for name, get := range map[string]func(state.NodeSystem) *float64{
			"gpuUsage": func(v state.NodeSystem) *float64 { return v.GPUUsage },
			"temp":     func(v state.NodeSystem) *float64 { return v.Temp },
			"sysPower": func(v state.NodeSystem) *float64 { return v.SysPower },
			"cpuUsage": func(v state.NodeSystem) *float64 { return v.CPUUsage },
		} {
			var xs []float64
			for _, v := range vs {
				if p := get(v); p != nil {
					xs = append(xs, *p)
				}
			}
			if len(xs) == 0 {
				continue
			}
			sum := 0.0
			for _, x := range xs {
				sum += x
			}
			m[name] = benchMetricsSummary{Min: round3(slices.Min(xs)), Max: round3(slices.Max(xs)), Mean: round3(sum / float64(len(xs))), Samples: len(xs)}
		}
		out[id] = m
	}
	return out
}

// benchProgress draws a bar on a terminal, a line per step elsewhere.
type benchProgress struct {
	w          io.Writer
	total, n   int
	tty, drawn bool
}

func (p *benchProgress) bar(text string) string {
	const width = 24
	fill := 0
	if p.total > 0 {
		fill = p.n * width / p.total
	}
	return fmt.Sprintf("[%s%s] %d/%d %s", strings.Repeat("=", fill), strings.Repeat(" ", width-fill), p.n, p.total, text)
}

func (p *benchProgress) step(text string) {
	p.n++
	p.line(text)
}

func (p *benchProgress) line(text string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.bar(text))
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "orrery bench: %s\n", p.bar(text))
}

func (p *benchProgress) done() {
	if p.tty && p.drawn {
		fmt.Fprintf(p.w, "\r\033[K%s\n", p.bar("done"))
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// printBenchTable prints one row per placement × pp × tg × concurrency:
// medians over its runs.
func printBenchTable(w io.Writer, out *benchOutput) {
	type key struct {
		placement    string
		pp, tg, conc int
	}
	groups := map[key][]benchRun{}
	var order []key
	for _, r := range out.Runs {
		k := key{r.Placement, r.PP, r.TG, r.Concurrency}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "placement\tpp\ttg\tconc\tprompt tok/s\tgen tok/s\tthroughput\tTTFT ms\tenergy J\tavg W\tpeak mem\truns\t")
	for _, k := range order {
		rs := groups[k]
		med := func(f func(benchRun) float64) float64 {
			xs := make([]float64, 0, len(rs))
			for _, r := range rs {
				xs = append(xs, f(r))
			}
			return median(xs)
		}
		optMed := func(f func(benchRun) *float64) string {
			var xs []float64
			for _, r := range rs {
				if v := f(r); v != nil {
					xs = append(xs, *v)
				}
			}
			if len(xs) < len(rs) || len(xs) == 0 {
				return "–"
			}
			return strconv.FormatFloat(median(xs), 'f', 1, 64)
		}
		var peak uint64
		for _, r := range rs {
			for _, m := range r.PeakMemory {
				peak = max(peak, m.InBytes)
			}
		}
		errs := 0
		for _, r := range rs {
			errs += len(r.Errors)
		}
		runs := strconv.Itoa(len(rs))
		if errs > 0 {
			runs += fmt.Sprintf(" (%d errors)", errs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t\n", k.placement, k.pp, k.tg, k.conc,
			med(func(r benchRun) float64 { return r.PromptTPS }), med(func(r benchRun) float64 { return r.GenTPS }),
			med(func(r benchRun) float64 { return r.GenThroughputTPS }), med(func(r benchRun) float64 { return r.TTFTMs }),
			optMed(func(r benchRun) *float64 { return r.EnergyJ }), optMed(func(r benchRun) *float64 { return r.AvgWatts }),
			humanBytes(int64(peak)), runs)
	}
	tw.Flush()
	fmt.Fprintln(w, "(medians over the runs; peak mem: the most any node of the placement used; energy and W are – where a node's power is unknown)")
}

// writeJSONFile writes v as indented JSON, atomically (temp + rename).
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, func(w io.Writer) error {
		if _, err := w.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	})
}
