package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/split"
	"github.com/orrery-cluster/orrery/internal/freeport"
)

// TPOptions configures TP: one request's prefill and decode on one runner
// against a tensor-parallel group of runners, and the group's all-reduce.
type TPOptions struct {
	Model string
	Ranks int
	// Cores pins runner i (and the single runner) to Cores[i] with
	// taskset; nil leaves them unpinned. Each runner computes on one
	// thread when pinned.
	Cores []int
	// PP, TG and Repeat as in EngineOptions (one more run warms up).
	PP, TG, Repeat int
	// Bin is the orrery binary the runners run.
	Bin string
	// Dir holds the slices (written when missing).
	Dir string
	// ReduceIters all-reduces of one decode row (Dim f32) are timed.
	ReduceIters int
	// Concurrent decodes of TG tokens run at once in the batched test
	// (0: none); each runner serves that many slots.
	Concurrent int
	// Experts is how a mixture's experts split (split.PlanTPExperts).
	Experts split.ExpertSplit
	// Wire is the group's all-reduce wire type (runner --tp-wire).
	Wire collective.Wire
}

// TPReport is what TP measured; it is tp-bench's --json.
type TPReport struct {
	Model      string          `json:"model"`
	Ranks      int             `json:"ranks"`
	Wire       string          `json:"wire"`
	Cores      []int           `json:"cores,omitempty"`
	Config     string          `json:"config"`
	ModelBytes int64           `json:"modelBytes"`
	SliceBytes []int64         `json:"sliceBytes"`
	Slices     []model.TPSlice `json:"slices"`
	Single     TPSide          `json:"single"`
	Tensor     TPSide          `json:"tensor"`
	DecodeX    float64         `json:"decodeSpeedup"`
	// DecodeRounds is each round's decode speed-up (the group's over the
	// single runner's, measured one after the other).
	DecodeRounds []float64 `json:"decodeSpeedupByRound"`
	BatchedX     float64   `json:"batchedSpeedup"`
	Concurrent   int       `json:"concurrent"`
	PrefillX     float64   `json:"prefillSpeedup"`
	// Together is the single runner's side again, but with a runner like
	// it on every other core of Cores prefilling and decoding at the same
	// time, in each round after the group's; each figure is the slowest
	// runner's (pinned runs only). The ceilings are Ranks times those
	// over the single runner's alone: the speed-up a group could reach on
	// these cores were its communication free, for the cores slow each
	// other when all compute (by round for decode).
	Together       TPSide    `json:"together"`
	PrefillCeiling float64   `json:"prefillCeiling,omitempty"`
	DecodeCeiling  float64   `json:"decodeCeiling,omitempty"`
	CeilingRounds  []float64 `json:"decodeCeilingByRound,omitempty"`
	// CeilingSkipped says why the ceiling was not measured, pinned.
	CeilingSkipped string        `json:"ceilingSkipped,omitempty"`
	AllReduce      ReduceFigures `json:"allReduce"`
	// Choice is the --choice part (nil when not run).
	Choice *ChoiceReport `json:"choice,omitempty"`
}

// TPSide is one side's runs.
type TPSide struct {
	PrefillTokPerSec []float64 `json:"prefillTokPerSec"`
	DecodeTokPerSec  []float64 `json:"decodeTokPerSec"`
	Prefill          float64   `json:"prefillMean"`
	Decode           float64   `json:"decodeMean"`
	// DecodeTraced is the decode with the request traced (every
	// all-reduce a span on the group's side).
	DecodeTracedTokPerSec []float64 `json:"decodeTracedTokPerSec"`
	DecodeTraced          float64   `json:"decodeTracedMean"`
	// From the traced decodes' spans, per token on rank 0: its forward
	// passes, and the all-reduces inside them (the wait for the slowest
	// rank included).
	DecodeComputeMs     float64 `json:"decodeComputeMs"`
	DecodeReduceMs      float64 `json:"decodeReduceMs"`
	computeNs, reduceNs int64
	tracedTokens        int
	// Batched is the aggregate decode tok/s of Concurrent requests at once.
	BatchedTokPerSec []float64 `json:"batchedTokPerSec"`
	Batched          float64   `json:"batchedMean"`
}

// ReduceFigures are the all-reduce's timings through the runners' path.
type ReduceFigures struct {
	Values int     `json:"values"`
	Iters  int     `json:"iters"`
	P50Us  float64 `json:"p50Us"`
	P99Us  float64 `json:"p99Us"`
}

// TP runs the benchmark; progress goes to log.
func TP(ctx context.Context, o TPOptions, log io.Writer) (*TPReport, error) {
	f, err := gguf.ReadFile(o.Model)
	if err != nil {
		return nil, err
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	plan, err := split.PlanTPExperts(f, cfg, o.Ranks, o.Experts)
	if err != nil {
		return nil, err
	}
	if o.Cores != nil && len(o.Cores) < o.Ranks {
		return nil, fmt.Errorf("%d cores for %d ranks", len(o.Cores), o.Ranks)
	}
	rep := &TPReport{Model: o.Model, Ranks: o.Ranks, Wire: o.Wire.String(), Cores: o.Cores, Config: cfg.String(), Slices: plan}
	for _, t := range f.Tensors {
		rep.ModelBytes += int64(t.Size)
	}
	paths, err := writeSlices(o, cfg, plan, log)
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		rep.SliceBytes = append(rep.SliceBytes, st.Size())
	}
	fmt.Fprintf(log, "all-reduce of %d f32 between %d ranks…\n", cfg.Dim, o.Ranks)
	if rep.AllReduce, err = tpReduce(ctx, o, cfg.Dim); err != nil {
		return nil, fmt.Errorf("all-reduce: %w", err)
	}
	fmt.Fprintf(log, "starting one runner and %d tensor-parallel runners…\n", o.Ranks)
	single, err := startTPRunners(ctx, o, []string{o.Model})
	if err != nil {
		return nil, fmt.Errorf("one runner: %w", err)
	}
	defer single.close()
	group, err := startTPRunners(ctx, o, paths)
	if err != nil {
		return nil, fmt.Errorf("tensor-parallel runners: %w", err)
	}
	defer group.close()
	singles, err := startTwins(ctx, o, rep, single, log)
	if err != nil {
		return nil, err
	}
	for _, t := range singles[1:] {
		defer t.close()
	}
	what := "one runner then on the group"
	if len(singles) > 1 {
		what += fmt.Sprintf(", then on %d runners at once, one a core", len(singles))
	}
	fmt.Fprintf(log, "%d rounds, each on %s…\n", o.Repeat+1, what)
	if rep.Single, rep.Tensor, rep.Together, err = tpSides(ctx, o, singles, group); err != nil {
		return nil, err
	}
	rep.DecodeRounds = ratios(rep.Tensor.DecodeTokPerSec, rep.Single.DecodeTokPerSec)
	if rep.Single.Decode > 0 {
		rep.DecodeX = rep.Tensor.Decode / rep.Single.Decode
	}
	if rep.Single.Batched > 0 {
		rep.BatchedX = rep.Tensor.Batched / rep.Single.Batched
	}
	rep.Concurrent = o.Concurrent
	if rep.Single.Prefill > 0 {
		rep.PrefillX = rep.Tensor.Prefill / rep.Single.Prefill
	}
	if len(singles) > 1 {
		rep.ceilings()
	}
	return rep, nil
}

// writeSlices writes the model's slices into o.Dir, unless there already
// (cut by the same plan).
func writeSlices(o TPOptions, cfg model.Config, plan []model.TPSlice, log io.Writer) ([]string, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	st, err := os.Stat(o.Model)
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(filepath.Base(o.Model), ".gguf")
	var paths []string
	for _, s := range plan {
		how := ""
		switch {
		case s.ExpertColumns:
			how = "-expert-columns"
		case s.FullExperts > 0:
			how = "-experts-whole"
		}
		p := filepath.Join(o.Dir, fmt.Sprintf("%s-%d-tp%d-of-%d%s.gguf", base, st.Size(), s.Rank, s.Ranks, how))
		if !sliceOf(p, s) {
			fmt.Fprintf(log, "writing slice %d of %d: %d/%d heads, ff %d, experts %d/%d…\n", s.Rank, s.Ranks, s.Heads, s.FullHeads, s.FFDim, s.Experts, s.FullExperts)
			if err := split.WriteTPSlice(o.Model, p, 0, cfg.Layers, s, "tp-bench"); err != nil {
				return nil, err
			}
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// sliceOf reports whether path is slice s: a file cut by another plan
// (an older version's) is written again.
func sliceOf(path string, s model.TPSlice) bool {
	f, err := gguf.ReadFile(path)
	if err != nil {
		return false
	}
	cfg, err := model.FromGGUF(f)
	return err == nil && cfg.TP != nil && *cfg.TP == s
}

// tpCmd is the orrery binary with args, pinned to rank's core if any.
func tpCmd(ctx context.Context, o TPOptions, rank int, args ...string) *exec.Cmd {
	if o.Cores == nil {
		return exec.CommandContext(ctx, o.Bin, args...)
	}
	return exec.CommandContext(ctx, "taskset", append([]string{"-c", strconv.Itoa(o.Cores[rank]), o.Bin}, args...)...)
}

func token() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tpRunners is one side of the benchmark: one runner, or a
// tensor-parallel group served through rank 0.
type tpRunners struct {
	client *runnerapi.Client
	vocab  int
	stops  []func()
}

func (g *tpRunners) close() {
	for _, s := range g.stops {
		s()
	}
}

// startTPRunners starts one runner per path (a tensor-parallel group when
// more than one) and waits until rank 0 serves.
func startTPRunners(ctx context.Context, o TPOptions, paths []string) (*tpRunners, error) {
	return startTPRunnersAt(ctx, o, paths, 0)
}

// startTPRunnersAt is startTPRunners with runner i pinned as rank
// first+i.
func startTPRunnersAt(ctx context.Context, o TPOptions, paths []string, first int) (*tpRunners, error) {
	g := &tpRunners{}
	rtok, gtok := token(), token()
	addrs, err := freeport.Addrs(len(paths))
	if err != nil {
		return nil, err
	}
	// Pinned: one thread on its core. Unpinned: the machine's cores
	// shared out (ggml's threads spin while they wait: more threads than
	// cores would mostly wait for each other).
	threads := "1"
	if o.Cores == nil {
		threads = strconv.Itoa(max(1, runtime.NumCPU()/len(paths)))
	}
	for r, p := range paths {
		slots := max(o.Concurrent, 1)
		args := []string{"runner", "--model", p, "--threads", threads, "--ctx", strconv.Itoa(slots * (o.PP + o.TG + 16)),
			"--batch", strconv.Itoa(max(o.PP, 1)), "--parallel", strconv.Itoa(slots)}
		if len(paths) > 1 {
			args = append(args, "--tp-rank", strconv.Itoa(r), "--tp-ranks", strconv.Itoa(len(paths)), "--tp-addrs", strings.Join(addrs, ","),
				"--tp-wire", o.Wire.String())
		}
		cmd := tpCmd(ctx, o, first+r, args...)
		cmd.Env = append(os.Environ(), runnerapi.TokenEnv+"="+rtok, runnerapi.GroupTokenEnv+"="+gtok)
		addr, stop, err := startRunner(cmd)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		g.stops = append(g.stops, stop)
		if r == 0 {
			g.client = &runnerapi.Client{Addr: addr, Token: rtok}
		}
	}
	if err := waitReady(ctx, g.client); err != nil {
		g.close()
		return nil, err
	}
	if h, err := g.client.Health(ctx); err == nil && h.Vocab > 0 {
		g.vocab = h.Vocab
	}
	return g, nil
}

// startRunner starts a runner process and reads the address it announces;
// stop closes its stdin (it exits) and waits.
func startRunner(cmd *exec.Cmd) (string, func(), error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &tailWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), runnerapi.ListenPrefix); ok {
			go io.Copy(io.Discard, out)
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("runner exited before announcing its address: %s", stderr.String())
}

// tailWriter keeps about the last 4 KiB written.
type tailWriter struct{ w *strings.Builder }

func (t *tailWriter) Write(p []byte) (int, error) {
	t.w.Write(p)
	if t.w.Len() > 8<<10 {
		s := t.w.String()
		t.w.Reset()
		t.w.WriteString(s[len(s)-4<<10:])
	}
	return len(p), nil
}

func waitReady(ctx context.Context, c *runnerapi.Client) error {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		h, err := c.Health(ctx)
		if err == nil {
			switch h.Status {
			case runnerapi.StatusReady:
				return nil
			case runnerapi.StatusFailed:
				return fmt.Errorf("runner failed: %s", h.Error)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("runner not ready after 5 minutes")
}

// tpReduce times o.ReduceIters all-reduces of n f32 between o.Ranks
// processes (tp-bench's --reduce-worker), pinned like the runners and
// linked as they are (direct loopback TCP with the group's token).
func tpReduce(ctx context.Context, o TPOptions, n int) (ReduceFigures, error) {
	fig := ReduceFigures{Values: n, Iters: o.ReduceIters}
	addrs, err := freeport.Addrs(o.Ranks)
	if err != nil {
		return fig, err
	}
	gtok := token()
	cmds := make([]*exec.Cmd, o.Ranks)
	outs := make([]strings.Builder, o.Ranks)
	for r := range cmds {
		cmds[r] = tpCmd(ctx, o, r, "tp-bench", "--reduce-worker", strconv.Itoa(r), "--reduce-addrs", strings.Join(addrs, ","),
			"--reduce-values", strconv.Itoa(n), "--reduce-iters", strconv.Itoa(o.ReduceIters))
		cmds[r].Env = append(os.Environ(), runnerapi.GroupTokenEnv+"="+gtok)
		cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
		if err := cmds[r].Start(); err != nil {
			return fig, err
		}
	}
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			return fig, fmt.Errorf("rank %d: %v: %s", r, err, outs[r].String())
		}
	}
	if err := json.Unmarshal([]byte(outs[0].String()), &fig); err != nil {
		return fig, fmt.Errorf("rank 0 said %q: %w", outs[0].String(), err)
	}
	return fig, nil
}

// ReduceWorker is one rank of tpReduce: it links to the others and, as
// rank 0, prints the figures as JSON.
func ReduceWorker(ctx context.Context, rank int, addrs []string, token string, n, iters int, out io.Writer) error {
	ln, err := net.Listen("tcp", addrs[rank])
	if err != nil {
		return err
	}
	defer ln.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := collective.Connect(cctx, rank, len(addrs), addrs, ln, token)
	if err != nil {
		return err
	}
	defer m.Close()
	buf := make([]float32, n)
	times := make([]time.Duration, 0, iters)
	for i := range iters + iters/10 { // a tenth more to warm up
		for k := range buf {
			buf[k] = float32(k + rank)
		}
		start := time.Now()
		if err := m.AllReduce(buf); err != nil {
			return err
		}
		if i >= iters/10 {
			times = append(times, time.Since(start))
		}
	}
	if rank != 0 {
		return nil
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	fig := ReduceFigures{Values: n, Iters: iters, P50Us: us(times[len(times)/2]), P99Us: us(times[len(times)*99/100])}
	return json.NewEncoder(out).Encode(fig)
}
