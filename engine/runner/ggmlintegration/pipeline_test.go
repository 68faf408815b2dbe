package ggmlintegration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/split"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/delayproxy"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// pipeline is N runner servers in this process, one per shard, whose rank
// links go straight over loopback TCP (the agents' relay, which presents
// the runner's token first, is imitated by dialNext).
type pipeline struct {
	servers []*runner.Server
	lns     []net.Listener
	client  *runnerapi.Client // rank 0's
	mu      sync.Mutex
	traces  map[int][]trace.Span // stage spans by rank
	conns   []net.Conn           // every link end dialled, to cut them
}

func startPipeline(t *testing.T, path string, ranges [][2]int) *pipeline {
	t.Helper()
	return startPipelineN(t, path, ranges, 1)
}

// startPipelineN starts a pipeline whose ranks serve parallel slots.
func startPipelineN(t *testing.T, path string, ranges [][2]int, parallel int) *pipeline {
	t.Helper()
	return startPipelineDraft(t, path, ranges, parallel, "")
}

// startPipelineDraft starts a pipeline whose rank 0 loads draft (the whole
// model file, "": none) as its draft model "draft".
func startPipelineDraft(t *testing.T, path string, ranges [][2]int, parallel int, draft string) *pipeline {
	t.Helper()
	return startPipelineWith(t, path, ranges, pipeOpts{parallel: parallel, draft: draft, threads: 1, batch: 4, kv: "f32"})
}

// pipeOpts shape a pipeline: slots, draft model, each rank's threads,
// batch and KV cache type, and the delay a proxy adds each way on every
// rank link (0: none).
type pipeOpts struct {
	parallel, threads, batch int
	draft, kv                string
	delay                    time.Duration
}

func startPipelineWith(t testing.TB, path string, ranges [][2]int, o pipeOpts) *pipeline {
	t.Helper()
	n := len(ranges)
	p := &pipeline{traces: map[int][]trace.Span{}}
	for range ranges {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		p.lns = append(p.lns, ln)
	}
	// Each rank dials the next one's listener, or a delay proxy in front
	// of it.
	addrs := make([]string, n)
	for r, ln := range p.lns {
		addrs[r] = ln.Addr().String()
		if o.delay > 0 {
			pl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			up := addrs[r]
			px := delayproxy.New(pl, o.delay, func(ctx context.Context) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", up)
			})
			t.Cleanup(func() { px.Close() })
			addrs[r] = px.Addr().String()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var wg sync.WaitGroup
	for r, rg := range ranges {
		shard := path
		if n > 1 {
			shard = filepath.Join(t.TempDir(), fmt.Sprintf("shard-%d.gguf", r))
			if err := split.WriteShard(path, shard, rg[0], rg[1], "test"); err != nil {
				t.Fatal(err)
			}
		}
		next := (r + 1) % n
		s := runner.NewServer(runner.Config{ModelPath: shard, Load: serialLoad, Token: fmt.Sprintf("tok-%d", r), Node: fmt.Sprintf("node-%d", r),
			Options: backend.Options{Threads: o.threads, BatchSize: o.batch, KVType: o.kv, Parallel: o.parallel}, Instance: "inst-t", Rank: r, Shape: runnerapi.Shape{Pipeline: n, Tensor: 1},
			RankListener: p.lns[r],
			DialNext: func(ctx context.Context) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addrs[next])
				if err != nil {
					return nil, err
				}
				if err := runnerapi.SendAuth(c, fmt.Sprintf("tok-%d", next)); err != nil {
					c.Close()
					return nil, err
				}
				p.mu.Lock()
				p.conns = append(p.conns, c)
				p.mu.Unlock()
				return c, nil
			},
			DraftModelPath: map[bool]string{true: o.draft}[r == 0], DraftID: "draft",
			OnStageTrace: func(id string, spans []trace.Span, _ []trace.CounterSample, err error) {
				p.mu.Lock()
				p.traces[r] = append(p.traces[r], spans...)
				p.mu.Unlock()
			}})
		t.Cleanup(s.Close)
		p.servers = append(p.servers, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Load(ctx); err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}()
	}
	wg.Wait()
	hs := httptest.NewServer(p.servers[0].Handler())
	t.Cleanup(hs.Close)
	p.client = &runnerapi.Client{Addr: strings.TrimPrefix(hs.URL, "http://"), Token: "tok-0"}
	return p
}

// computeMu serialises forward passes across the ranks in this process:
// ggml's CPU backend is not safe for several backends computing at once in
// one process (a runner process holds one rank, so this never arises
// outside tests), which here gave NaN logits.
var computeMu sync.Mutex

type serialRank struct{ backend.Rank }

func (r serialRank) Forward(ctx context.Context, b backend.Batch) (backend.Result, error) {
	computeMu.Lock()
	defer computeMu.Unlock()
	return r.Rank.Forward(ctx, b)
}

func serialLoad(ctx context.Context, path string, opts backend.Options, progress func(float32)) (backend.Rank, error) {
	r, err := load(ctx, path, opts, progress)
	if err != nil {
		return nil, err
	}
	return serialRank{r}, nil
}

func (p *pipeline) complete(t *testing.T, req runnerapi.CompletionRequest) ([]int32, *runnerapi.Done, error) {
	t.Helper()
	var toks []int32
	done, err := p.client.Complete(context.Background(), req, func(pc runnerapi.Piece) error {
		if pc.Token >= 0 {
			toks = append(toks, pc.Token)
		}
		return nil
	})
	return toks, done, err
}

// Greedy generation over 2 and 3 ranks (links over TCP, prompt in
// batches of 4 pipelined across the ranks) picks exactly the tokens of 1
// rank, and seeded sampling on the last rank matches too; for every
// family gen-model writes (a mixture of experts included: its layers run
// on whichever rank holds them, and only the hidden state crosses a link).
func TestPipelineGeneration(t *testing.T) {
	for _, fam := range model.Families {
		typ := "Q8_0"
		if fam == "gpt-oss" { // as it ships: MXFP4 experts
			typ = "MXFP4"
		}
		t.Run(fam, func(t *testing.T) { pipelineGeneration(t, genFamily(t, fam, typ)) })
	}
}

func pipelineGeneration(t *testing.T, path string) {
	req := runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: "the cluster is a model of the world", MaxTokens: 10, IgnoreEOS: true}}
	seeded := req
	seeded.Sample.Temperature, seeded.Sample.Seed = 0.8, 9
	var base, baseSeeded []int32
	for i, ranges := range splits {
		p := startPipeline(t, path, ranges)
		for r, s := range p.servers {
			if h := s.Health(); h.Status != runnerapi.StatusReady || h.Rank != r || h.Ranks != len(ranges) {
				t.Fatalf("rank %d health %+v", r, h)
			}
		}
		greedy, done, err := p.complete(t, req)
		if err != nil {
			for r, s := range p.servers {
				select {
				case e := <-s.Fatal():
					t.Logf("rank %d: %v", r, e)
				default:
				}
			}
			t.Fatal(err)
		}
		sampled, _, err := p.complete(t, seeded)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			base, baseSeeded = greedy, sampled
			continue
		}
		t.Logf("%d ranks: %v (prefill %.0f tok/s, decode %.0f tok/s)", len(ranges), greedy, done.PrefillTokPerSec(), done.DecodeTokPerSec())
		if !slices.Equal(greedy, base) || !slices.Equal(sampled, baseSeeded) {
			t.Errorf("%d ranks: greedy %v / seeded %v; 1 rank: %v / %v", len(ranges), greedy, sampled, base, baseSeeded)
		}
		if h := p.servers[1].Health(); h.LinkBytesSent == 0 || h.LinkBytesRecv == 0 {
			t.Errorf("rank 1 counted no link bytes: %+v", h)
		}
	}
}

// A traced request leaves compute, send and recv spans on every rank, in
// prefill and decode, sample on the last, and flows that pair up.
func TestPipelineSpans(t *testing.T) {
	p := startPipeline(t, genModel(t, "F32"), splits[2])
	_, done, err := p.complete(t, runnerapi.CompletionRequest{TraceID: "t-1", Request: runnerapi.Request{Prompt: "hello world", MaxTokens: 4, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the spans of ranks 1 and 2", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.traces[1]) > 0 && len(p.traces[2]) > 0
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	all := map[int][]trace.Span{0: done.Spans, 1: p.traces[1], 2: p.traces[2]}
	want := map[int][]string{
		0: {"prefill/compute", "prefill/send", "prefill/recv", "decode/compute", "decode/send", "decode/recv"},
		1: {"prefill/recv", "prefill/compute", "prefill/send", "decode/recv", "decode/compute", "decode/send"},
		2: {"prefill/recv", "prefill/compute", "prefill/sample", "prefill/send", "decode/recv", "decode/compute", "decode/sample", "decode/send"},
	}
	outs, ins := map[uint64]bool{}, map[uint64]bool{}
	for r, spans := range all {
		cats := map[string]bool{}
		for _, s := range spans {
			cats[s.Cat] = true
			if s.Rank != r {
				t.Errorf("rank %d span on rank %d", r, s.Rank)
			}
			if f := s.Args.FlowOut(); f != 0 {
				outs[f] = true
			}
			if f := s.Args.FlowIn(); f != 0 {
				ins[f] = true
			}
		}
		for _, c := range want[r] {
			if !cats[c] {
				t.Errorf("rank %d: no %s span (has %v)", r, c, cats)
			}
		}
	}
	if len(outs) == 0 || len(outs) != len(ins) {
		t.Errorf("%d flows out, %d in", len(outs), len(ins))
	}
	for f := range outs {
		if !ins[f] {
			t.Errorf("flow %d has no receive end", f)
		}
	}
}

// Cutting the links mid-stream ends the completion with ErrLinkLost (and
// the spans so far), and rank 0 reports that its pipeline is dead.
func TestPipelineBreaks(t *testing.T) {
	p := startPipeline(t, genModel(t, "Q8_0"), splits[1])
	errc := make(chan error, 1)
	var got int
	var once sync.Once
	go func() {
		_, err := p.client.Complete(context.Background(), runnerapi.CompletionRequest{TraceID: "t-2",
			Request: runnerapi.Request{Prompt: "hi", MaxTokens: 400, IgnoreEOS: true}},
			func(runnerapi.Piece) error {
				got++
				if got == 5 {
					once.Do(func() {
						p.mu.Lock()
						for _, c := range p.conns {
							c.Close()
						}
						p.mu.Unlock()
					})
				}
				return nil
			})
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "rank link lost") {
			t.Fatalf("completion after the cut: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error 10 s after the links were cut")
	}
	select {
	case err := <-p.servers[0].Fatal():
		if !errors.Is(err, runner.ErrLinkLost) {
			t.Fatalf("fatal: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rank 0 did not report its dead pipeline")
	}
}

// Through a pipeline of three ranks, six requests at once on four slots
// get exactly the tokens each gets alone (F32): greedy, and seeded
// sampling (each request's own sampler on the last rank). Each traced
// request has its spans on every rank.
func TestPipelineBatches(t *testing.T) {
	p := startPipelineN(t, genModel(t, "F32"), [][2]int{{0, 1}, {1, 3}, {3, 4}}, 4)
	prompts := []string{"the cluster", "hello world", "a model split across machines", "one two three", "orrery", "pipeline ranks"}
	const n = 12
	req := func(i int, traced bool) runnerapi.CompletionRequest {
		r := runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: prompts[i], MaxTokens: n, IgnoreEOS: true}}
		if i%2 == 1 {
			r.Sample = sample.Options{Temperature: 0.9, TopK: 40, Seed: uint64(i)}
		}
		if traced {
			r.TraceID = fmt.Sprintf("chat-%d", i)
		}
		return r
	}
	alone := make([][]int32, len(prompts))
	for i := range prompts {
		var err error
		if alone[i], _, err = p.complete(t, req(i, false)); err != nil {
			t.Fatal(err)
		}
	}
	together := make([][]int32, len(prompts))
	dones := make([]*runnerapi.Done, len(prompts))
	var wg sync.WaitGroup
	for i := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if together[i], dones[i], err = p.complete(t, req(i, true)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := range prompts {
		if !slices.Equal(together[i], alone[i]) {
			t.Errorf("prompt %d: batched %v, alone %v", i, together[i], alone[i])
		}
		if dones[i] == nil || dones[i].CompletionTokens != n {
			t.Errorf("prompt %d: done %+v", i, dones[i])
		}
	}
	// Every rank traced every request (stage spans arrive when each ends).
	decode := 0
	if !testutil.Eventually(testutil.DefaultTimeout, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		decode = 0
		for _, sp := range p.traces[2] {
			if sp.Cat == "decode/sample" {
				decode++
			}
		}
		return len(p.traces[1]) > 0 && len(p.traces[2]) > 0 && decode == len(prompts)*(n-1)
	}) {
		t.Fatalf("last rank's decode/sample spans: %d, want %d", decode, len(prompts)*(n-1))
	}
}
