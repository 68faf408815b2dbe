package runner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// runSched starts a scheduler over g's engine until the test ends.
func runSched(t *testing.T, g *Generator) *Scheduler {
	t.Helper()
	return startSched(t, &Scheduler{E: g.M, Tok: g.Tok})
}

// startSched runs sc until the test ends.
func startSched(t *testing.T, sc *Scheduler) *Scheduler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- sc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	return sc
}

func submit(t *testing.T, g *Generator, sc *Scheduler, ctx context.Context, req runnerapi.Request) *Job {
	t.Helper()
	prompt, err := g.Prepare(&req)
	if err != nil {
		t.Fatal(err)
	}
	return sc.Submit(ctx, &req, prompt, "", nil)
}

func text(t *testing.T, j *Job) (string, runnerapi.Result, error) {
	t.Helper()
	var b strings.Builder
	res, err := j.Wait(func(p runnerapi.Piece) error { b.WriteString(p.Text); return nil })
	return b.String(), res, err
}

// Four requests at once share steps: their decode rows go in one batch,
// each in its own sequence, and each gets its own answer.
func TestSchedulerBatches(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello world", true)
	words := ids(t, tok, "the cluster is the model")
	s := &script{vocab: tok.VocabSize(), ctxLen: 256, batch: 64, parallel: 4, prompt: len(prompt), next: append(words, 4),
		block: make(chan struct{})}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	sc := runSched(t, g)
	var jobs []*Job
	for range 4 {
		jobs = append(jobs, submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello world", MaxTokens: 40}))
	}
	// The first forward pass waits until all four are queued.
	testutil.WaitFor(t, "the first forward pass", s.entered.Load)
	close(s.block)
	for i, j := range jobs {
		got, res, err := text(t, j)
		if err != nil || strings.TrimSpace(got) != "the cluster is the model" || res.CompletionTokens != len(words)+1 {
			t.Fatalf("job %d: %q %+v %v", i, got, res, err)
		}
	}
	widest := 0
	for i, seqs := range s.seqs {
		if len(s.batches[i]) == 4 && len(slices.Compact(slices.Clone(seqs))) == 4 {
			widest = 4
		}
	}
	if widest != 4 {
		t.Fatalf("no decode step held all four sequences: %v", s.seqs)
	}
}

// A request whose prompt starts like the last one's reuses its cache: the
// second turn of a conversation computes only its new tokens; a slot
// other requests left is chosen for the longest shared prefix.
func TestSchedulerPrefixCache(t *testing.T) {
	tok := tinyTokenizer(t)
	s := &script{vocab: tok.VocabSize(), ctxLen: 256, batch: 64, parallel: 2, next: []int32{4}}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	sc := runSched(t, g)
	turn1 := "user: what is a cluster? assistant:"
	_, res, err := text(t, submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: turn1}))
	if err != nil || res.CachedTokens != 0 {
		t.Fatalf("turn 1: %+v %v", res, err)
	}
	before := len(s.batches)
	turn2 := turn1 + " many machines. user: and a model?"
	_, res, err = text(t, submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: turn2}))
	p1, _ := tok.Encode(turn1, true)
	p2, _ := tok.Encode(turn2, true)
	want := commonPrefix(p1, p2)
	if err != nil || res.CachedTokens != want || res.PromptTokens != len(p2) || want < len(p1)-1 {
		t.Fatalf("turn 2: %+v %v, want %d cached of %d", res, err, want, len(p2))
	}
	if first := s.batches[before][0]; int(first) != want {
		t.Fatalf("turn 2 prefilled from position %d, want %d", first, want)
	}
	// The same prompt again: all but its last token cached.
	_, res, _ = text(t, submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: turn2}))
	if res.CachedTokens != len(p2)-1 {
		t.Fatalf("same prompt: %d cached of %d", res.CachedTokens, len(p2))
	}
	// A scheduler for benchmarks keeps nothing.
	if got := (&Generator{M: &Local{F: s}, Tok: tok}); true {
		_, _, res, err := run(t, got, runnerapi.Request{Prompt: turn2}, nil)
		if err != nil || res.CachedTokens != 0 {
			t.Fatalf("Generate: %+v %v", res, err)
		}
	}
}

// A cancelled request stops within a step and frees its slot for the
// next; one queued behind a busy slot waits, and says how long.
func TestSchedulerCancelAndQueue(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello", true)
	long := make([]int32, 200)
	for i := range long {
		long[i] = 10 + int32(i%50)
	}
	s := &script{vocab: tok.VocabSize(), ctxLen: 256, batch: 64, parallel: 1, prompt: len(prompt), next: long, delay: 2 * time.Millisecond}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	sc := runSched(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	j := submit(t, g, sc, ctx, runnerapi.Request{Prompt: "hello", MaxTokens: 200})
	queued := submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello", MaxTokens: 2})
	var once sync.Once
	n := 0
	_, err := j.Wait(func(p runnerapi.Piece) error {
		n++
		if n == 3 {
			once.Do(cancel)
		}
		return nil
	})
	if !errors.Is(err, ErrCancelled) || n > 5 {
		t.Fatalf("cancelled after 3 pieces: %v after %d pieces", err, n)
	}
	_, res, err := text(t, queued)
	if err != nil || res.CompletionTokens != 2 || queued.QueueNs() <= 0 {
		t.Fatalf("queued job: %+v %v (queued %d ns)", res, err, queued.QueueNs())
	}
	// An emit error cancels too.
	j = submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello", MaxTokens: 200})
	boom := errors.New("client gone")
	if _, err := j.Wait(func(runnerapi.Piece) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("emit error: %v", err)
	}
	if _, res, err := text(t, submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello", MaxTokens: 1})); err != nil || res.CompletionTokens != 1 {
		t.Fatalf("after a client went away: %+v %v", res, err)
	}
}

// Spans of batched requests: each request's trace has its own prefill
// and decode spans with compute and sample children.
func TestSchedulerSpans(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello world", true)
	s := &script{vocab: tok.VocabSize(), ctxLen: 64, batch: 64, parallel: 2, prompt: len(prompt), next: ids(t, tok, "a b c"), block: make(chan struct{})}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	sc := runSched(t, g)
	var recs []*trace.Recorder
	var jobs []*Job
	for range 2 {
		rec := trace.NewRecorder(0, "n", trace.Options{})
		req := runnerapi.Request{Prompt: "hello world", MaxTokens: 3}
		p, _ := g.Prepare(&req)
		recs = append(recs, rec)
		jobs = append(jobs, sc.Submit(context.Background(), &req, p, "t", rec))
	}
	testutil.WaitFor(t, "the first forward pass", s.entered.Load)
	close(s.block)
	for i, j := range jobs {
		if _, _, err := text(t, j); err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, sp := range recs[i].Drain(0) {
			count[sp.Cat]++
		}
		want := map[string]int{"prefill": 1, "prefill/compute": 1, "prefill/sample": 1, "decode": 2, "decode/compute": 2, "decode/sample": 2}
		for cat, n := range want {
			if count[cat] != n {
				t.Errorf("request %d: %s: %d spans, want %d (%v)", i, cat, count[cat], n, count)
			}
		}
	}
}

// The slots share one pool of ContextLen positions: a request that would
// overfill it waits for the running ones, and idle slots' cached prefixes
// are forgotten (on every rank) to make room.
func TestSchedulerPool(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello", true)
	s := &script{vocab: tok.VocabSize(), ctxLen: 64, batch: 64, parallel: 4, prompt: len(prompt), next: ids(t, tok, "a b c d e f g h"),
		delay: time.Millisecond}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	sc := runSched(t, g)
	// Each reserves len(prompt)+20 positions: two fit in 64, the third
	// waits for one of them.
	var jobs []*Job
	for range 3 {
		jobs = append(jobs, submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello", MaxTokens: 20, IgnoreEOS: true}))
	}
	for i, j := range jobs {
		if _, res, err := text(t, j); err != nil || res.CompletionTokens != 20 {
			t.Fatalf("job %d: %+v %v", i, res, err)
		}
	}
	if q := jobs[2].QueueNs(); q < int64(10*time.Millisecond) {
		t.Errorf("the third request waited %v, want it to wait for a running one (≥ 20 steps of 1 ms)", time.Duration(q))
	}
	for _, seqs := range s.seqs {
		if len(slices.Compact(slices.Clone(seqs))) > 2 {
			t.Fatalf("a step held 3 sequences in a pool for 2: %v", seqs)
		}
	}
	// Slots 0 and 1 now hold cached prefixes; a request that needs the
	// whole pool takes one and makes the other forget.
	s.removed = nil
	long := strings.Repeat("x ", 20)
	if _, _, err := text(t, submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: long, MaxTokens: 64 - 22})); err != nil {
		t.Fatal(err)
	}
	forgot := 0
	for _, r := range s.removed {
		if r[1] == 0 {
			forgot++
		}
	}
	if forgot != 1 {
		t.Fatalf("removes %v: want the idle slots' caches forgotten", s.removed)
	}
}

// Once Run has ended, a request fails at once with the reason, and one
// queued when it ended fails with it too.
func TestSchedulerStopped(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello", true)
	s := &script{vocab: tok.VocabSize(), ctxLen: 64, batch: 64, parallel: 1, prompt: len(prompt), next: ids(t, tok, "a b c"), block: make(chan struct{})}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	sc := &Scheduler{E: g.M, Tok: tok}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- sc.Run(ctx) }()
	running := submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello"})
	queued := submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello"})
	// The running one is in its forward pass; the queued one waits.
	testutil.WaitFor(t, "the first forward pass", s.entered.Load)
	cancel()
	close(s.block)
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	for name, j := range map[string]*Job{"running": running, "queued": queued, "late": submit(t, g, sc, context.Background(), runnerapi.Request{Prompt: "hello"})} {
		if _, _, err := text(t, j); err == nil {
			t.Errorf("%s request: no error after the scheduler stopped", name)
		}
	}
}
