package ggmlintegration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/internal/reference"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

func genModel(t *testing.T, typ string) string { return genFamily(t, "llama", typ) }

// genFamily writes the tiny preset as family (model.Families).
func genFamily(t *testing.T, family, typ string) string {
	t.Helper()
	o, err := model.ApplyFamily(model.Presets["tiny"], family)
	if err != nil {
		t.Fatal(err)
	}
	o.Type, o.Seed = typ, 11
	path := filepath.Join(t.TempDir(), "tiny-"+family+"-"+typ+".gguf")
	if err := model.Generate(path, o); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(ctx context.Context, path string, opts backend.Options, progress func(float32)) (backend.Rank, error) {
	return ggml.Load(ctx, path, opts, progress)
}

func newServer(t *testing.T, path string) (*runner.Server, *runnerapi.Client) {
	t.Helper()
	return newServerOpts(t, path, backend.Options{Threads: 2, BatchSize: 16, KVType: "f32"})
}

func newServerOpts(t testing.TB, path string, opts backend.Options) (*runner.Server, *runnerapi.Client) {
	t.Helper()
	s := runner.NewServer(runner.Config{ModelPath: path, Load: load, Token: "secret", Node: "node-a", Options: opts})
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, &runnerapi.Client{Addr: strings.TrimPrefix(hs.URL, "http://"), Token: "secret"}
}

func complete(t *testing.T, c *runnerapi.Client, req runnerapi.CompletionRequest) ([]int32, string, *runnerapi.Done) {
	t.Helper()
	var toks []int32
	var text strings.Builder
	done, err := c.Complete(context.Background(), req, func(p runnerapi.Piece) error {
		if p.Token >= 0 {
			toks = append(toks, p.Token)
		}
		text.WriteString(p.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return toks, text.String(), done
}

// Greedy generation through the runner's server is deterministic and is
// the reference forward pass's argmax chain.
func TestGreedyMatchesReference(t *testing.T) {
	path := genModel(t, "F32")
	_, c := newServer(t, path)
	req := runnerapi.CompletionRequest{Request: runnerapi.Request{
		Messages: []runnerapi.Message{{Role: "user", Content: "hello orrery"}}, MaxTokens: 12}}
	a, text, done := complete(t, c, req)
	b, _, _ := complete(t, c, req)
	if !slices.Equal(a, b) {
		t.Fatalf("greedy runs differ:\n%v\n%v", a, b)
	}
	if done.CompletionTokens != len(a) || done.PromptTokens == 0 {
		t.Fatalf("usage %+v for %d tokens", done.Result, len(a))
	}
	t.Logf("%d tokens: %q (%s)", len(a), text, done.FinishReason)

	// The reference, fed the same prompt, picks the same tokens.
	_, tok := tokenizerOf(t, path)
	prompt, err := tok.Chat(req.Messages, tokenizer.ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.Encode(prompt, true)
	ref, err := reference.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logits []float64
	for i, id := range ids {
		logits = ref.Step(id, i)
	}
	for i, want := range a {
		got := int32(reference.Argmax(logits))
		if got != want {
			t.Fatalf("token %d: runner %d, reference %d", i, want, got)
		}
		if tok.EndsGeneration(got) {
			break
		}
		logits = ref.Step(got, len(ids)+i)
	}
}

func tokenizerOf(t testing.TB, path string) (model.Config, *tokenizer.Tokenizer) {
	t.Helper()
	_, cfg := modeltest.Read(t, path)
	return cfg, modeltest.Tokenizer(t, path)
}

// The same seed samples the same tokens; spans come back when traced;
// errors before the stream are typed.
func TestServerCompletion(t *testing.T) {
	s, c := newServer(t, genModel(t, "Q8_0"))
	if h := s.Health(); h.Status != runnerapi.StatusReady || h.LayersLoaded != 4 || h.TotalLayers != 4 || h.ContextLen != 512 {
		t.Fatalf("health %+v", h)
	}
	req := runnerapi.CompletionRequest{TraceID: "chat-1", Request: runnerapi.Request{Prompt: "the cluster", MaxTokens: 8,
		Sample: sample.Options{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: 5}}}
	a, _, done := complete(t, c, req)
	b, _, _ := complete(t, c, req)
	if !slices.Equal(a, b) {
		t.Fatalf("seeded runs differ: %v vs %v", a, b)
	}
	cats := map[string]bool{}
	for _, sp := range done.Spans {
		cats[sp.Cat] = true
		if sp.Node != "node-a" {
			t.Fatalf("span on node %q", sp.Node)
		}
	}
	for _, want := range []string{"prefill", "prefill/compute", "prefill/sample", "decode/compute", "decode/sample"} {
		if !cats[want] {
			t.Errorf("no %s span (have %v)", want, cats)
		}
	}
	spans, err := c.LoadSpans(context.Background())
	if err != nil || len(spans) != 3 || spans[len(spans)-1].Cat != "load" {
		t.Fatalf("load spans %v, %v", spans, err)
	}

	// Untraced: no spans.
	req.TraceID = ""
	if _, _, done := complete(t, c, req); len(done.Spans) != 0 {
		t.Fatalf("%d spans untraced", len(done.Spans))
	}

	long := runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: strings.Repeat("hello world ", 400)}}
	_, err = c.Complete(context.Background(), long, func(runnerapi.Piece) error { return nil })
	var re *runnerapi.RequestError
	if !errors.As(err, &re) || re.Kind != "prompt_too_long" || re.Status != 400 {
		t.Fatalf("long prompt: %v", err)
	}
	bad := &runnerapi.Client{Addr: c.Addr, Token: "wrong"}
	if _, err := bad.Health(context.Background()); !errors.As(err, &re) || re.Status != 401 {
		t.Fatalf("wrong token: %v", err)
	}
}

// Requests queue: with one slot a second request waits for the first and
// then runs. The order is read from the server's own spans (traced
// requests), not from when the client goroutines return: those can be
// scheduled in either order on a loaded machine.
func TestServerQueues(t *testing.T) {
	_, c := newServer(t, genModel(t, "Q8_0"))
	var wg sync.WaitGroup
	started := make(chan struct{})
	dones := make([]*runnerapi.Done, 2)
	run := func(i, n int) {
		defer wg.Done()
		once := sync.Once{}
		req := runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: "hi", MaxTokens: n}, TraceID: fmt.Sprintf("q%d", i)}
		done, err := c.Complete(context.Background(), req, func(runnerapi.Piece) error {
			if i == 0 {
				once.Do(func() { close(started) })
			}
			return nil
		})
		if err != nil {
			t.Error(err)
			return
		}
		dones[i] = done
	}
	wg.Add(2)
	go run(0, 200)
	<-started
	go run(1, 2)
	wg.Wait()
	if t.Failed() {
		return
	}
	if dones[1].QueueNs <= 0 {
		t.Errorf("second request did not queue (%d ns)", dones[1].QueueNs)
	}
	firstEnd, secondStart := int64(0), int64(math.MaxInt64)
	for _, s := range dones[0].Spans {
		firstEnd = max(firstEnd, s.EndNs())
	}
	for _, s := range dones[1].Spans {
		secondStart = min(secondStart, s.StartNs)
	}
	if len(dones[0].Spans) == 0 || len(dones[1].Spans) == 0 || secondStart < firstEnd {
		t.Fatalf("second request's work began at %d, before the first's ended at %d (%d and %d spans)",
			secondStart, firstEnd, len(dones[0].Spans), len(dones[1].Spans))
	}
}

// Requests batched together get the greedy tokens each gets alone: eight
// prompts run one by one, then all at once on four slots (decode rows of
// four sequences per step, prompts joining as others leave, prefixes
// cached from the runs alone). With F32 weights and cache every token
// agrees. With Q8_0 weights ggml quantizes activations and picks its
// matrix kernels by batch shape, so near-ties flip: the test reports how
// many tokens agree (docs/inference.md quotes it).
func TestServerBatchesLikeAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (every prompt batched and alone, on real ggml): runs in make test")
	}
	for _, c := range []struct {
		typ, kv string
		exact   bool
	}{{"F32", "f32", true}, {"Q8_0", "f16", false}} {
		t.Run(c.typ, func(t *testing.T) {
			same, total := batchedVsAlone(t, genModel(t, c.typ), c.kv)
			t.Logf("%s weights, %s cache: %d of %d greedy tokens agree batched and alone (counted up to each request's first divergence)",
				c.typ, c.kv, same, total)
			if c.exact && same != total || same < total/2 {
				t.Errorf("%d of %d tokens agree", same, total)
			}
		})
	}
}

func batchedVsAlone(t *testing.T, path, kv string) (same, total int) {
	_, c := newServerOpts(t, path, backend.Options{Threads: 2, BatchSize: 64, KVType: kv, Parallel: 4})
	prompts := []string{"the cluster", "hello world", "a model split across machines", "one two three", "orrery", "pipeline ranks",
		"mac studio and mac mini", "tokens per second"}
	const n = 24
	req := func(p string) runnerapi.CompletionRequest {
		return runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: p, MaxTokens: n, IgnoreEOS: true}}
	}
	alone := make([][]int32, len(prompts))
	for i, p := range prompts {
		alone[i], _, _ = complete(t, c, req(p))
	}
	together := make([][]int32, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			together[i], _, _ = complete(t, c, req(p))
		}()
	}
	wg.Wait()
	for i := range prompts {
		if len(together[i]) != n {
			t.Fatalf("prompt %d: %d tokens batched, want %d", i, len(together[i]), n)
		}
		k := 0
		for k < n && together[i][k] == alone[i][k] {
			k++
		}
		same += k
		total += n
	}
	return same, total
}

// With context shift on, generation runs past a 48-token context on the
// ggml backend: the keys kept are re-rotated by RoPE. Sliding-window and
// deepseek2's latent caches are refused with an error saying so.
func TestServerContextShift(t *testing.T) {
	for _, c := range []struct {
		family, refusal string
	}{{"llama", ""}, {"qwen3", ""}, {"glm4moe", ""}, {"gemma3", "sliding-window"}, {"deepseek2", "latent attention"}} {
		t.Run(c.family, func(t *testing.T) {
			s := runner.NewServer(runner.Config{ModelPath: genFamily(t, c.family, "F32"), Load: load, Token: "secret", Node: "node-a",
				ContextShift: true, Options: backend.Options{Threads: 2, BatchSize: 16, ContextLen: 48, KVType: "f32", Parallel: 2}})
			if err := s.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			hs := httptest.NewServer(s.Handler())
			t.Cleanup(hs.Close)
			cl := &runnerapi.Client{Addr: strings.TrimPrefix(hs.URL, "http://"), Token: "secret"}
			req := runnerapi.CompletionRequest{TraceID: "chat-shift", Request: runnerapi.Request{Prompt: "the cluster", MaxTokens: 120, IgnoreEOS: true}}
			var n int
			done, err := cl.Complete(context.Background(), req, func(p runnerapi.Piece) error {
				if p.Token >= 0 {
					n++
				}
				return nil
			})
			if c.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), c.refusal) {
					t.Fatalf("%v after %d tokens, want the shift refused (%s)", err, n, c.refusal)
				}
				return
			}
			if err != nil || n != 120 || done.CompletionTokens != 120 {
				t.Fatalf("%d tokens, %+v, %v", n, done, err)
			}
			shifts := 0
			var took time.Duration
			for _, sp := range done.Spans {
				if sp.Cat == "shift" {
					shifts++
					took += time.Duration(sp.DurNs)
				}
			}
			t.Logf("%d shifts took %v; decode %.1f tok/s", shifts, took, done.DecodeTokPerSec())
			if shifts < 2 {
				t.Fatalf("%d context shift spans over 120 tokens in a context of 48", shifts)
			}
		})
	}
}

// Closing a server mid-generation stops its scheduler before the weights
// are freed: the request ends with an error, nothing crashes.
func TestServerCloseMidGeneration(t *testing.T) {
	s, c := newServerOpts(t, genModel(t, "Q8_0"), backend.Options{Threads: 2, BatchSize: 16, KVType: "f16", Parallel: 2})
	started := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := c.Complete(context.Background(), runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: "the cluster", MaxTokens: 500, IgnoreEOS: true}},
			func(runnerapi.Piece) error { once.Do(func() { close(started) }); return nil })
		errc <- err
	}()
	<-started
	s.Close()
	if err := <-errc; err == nil {
		t.Fatal("the request finished although its server closed")
	}
	s.Close() // twice is harmless
}
