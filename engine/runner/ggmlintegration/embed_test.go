package ggmlintegration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// genEmbedder writes the tiny preset of family as an embedding model.
func genEmbedder(t *testing.T, family string, pool model.Pooling) string {
	t.Helper()
	o, err := model.ApplyFamily(model.Presets["tiny"], family)
	if err != nil {
		t.Fatal(err)
	}
	o.Type, o.Seed, o.Pooling = "F32", 11, pool
	path := filepath.Join(t.TempDir(), fmt.Sprintf("tiny-%s-%s.gguf", family, pool))
	if err := model.Generate(path, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantEmbedding is one input's vector computed straight on the backend:
// one forward pass of every row alone in a fresh cache, its normed rows
// pooled and normalised here.
func wantEmbedding(t *testing.T, path string, ids []int32) []float64 {
	t.Helper()
	r, err := load(context.Background(), path, backend.Options{Threads: 2, BatchSize: 512, KVType: "f32"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cfg := r.Config()
	rows := make([]int32, len(ids))
	for i := range rows {
		rows[i] = int32(i)
	}
	res, err := r.Forward(context.Background(), backend.Batch{Tokens: ids, Positions: positions(0, len(ids)), Embeds: rows, Outputs: []int32{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Logits != nil || len(res.Embeds) != len(ids)*cfg.Dim {
		t.Fatalf("embedding-only pass: %d logits, %d embedding values for %d rows of %d", len(res.Logits), len(res.Embeds), len(ids), cfg.Dim)
	}
	v := make([]float64, cfg.Dim)
	switch cfg.Pooling {
	case model.PoolMean:
		for i, x := range res.Embeds {
			v[i%cfg.Dim] += float64(x) / float64(len(ids))
		}
	case model.PoolCLS:
		for i := range v {
			v[i] = float64(res.Embeds[i])
		}
	case model.PoolLast:
		for i := range v {
			v[i] = float64(res.Embeds[(len(ids)-1)*cfg.Dim+i])
		}
	}
	var n float64
	for _, x := range v {
		n += x * x
	}
	for i := range v {
		v[i] /= math.Sqrt(n)
	}
	return v
}

func cosine(a []float64, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * float64(b[i])
		aa += a[i] * a[i]
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// Each pooling type, through the runner's server: several inputs at once
// in 4 slots (batched together, prompts longer than the batch of 16 in
// chunks), vectors of unit length equal to one backend pass per input.
func TestServerEmbeddings(t *testing.T) {
	texts := []string{"hello", "the quick brown fox jumps over the lazy dog and then some more words to pass sixteen tokens", "a", "embeddings pool the normed rows", "x y z"}
	for _, pool := range []model.Pooling{model.PoolMean, model.PoolCLS, model.PoolLast} {
		t.Run(string(pool), func(t *testing.T) {
			path := genEmbedder(t, "llama", pool)
			_, tok := tokenizerOf(t, path)
			_, c := newServerOpts(t, path, backend.Options{Threads: 2, BatchSize: 16, KVType: "f32", Parallel: 4})
			req := runnerapi.EmbedRequest{}
			for _, s := range texts {
				req.Inputs = append(req.Inputs, runnerapi.EmbedInput{Text: s})
			}
			res, err := c.Embed(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for i, s := range texts {
				ids, err := tok.Encode(s, true)
				if err != nil {
					t.Fatal(err)
				}
				if pool == model.PoolLast && !tok.EndsGeneration(ids[len(ids)-1]) {
					t.Errorf("input %d: last pooling's tokenizer should append EOS: %v", i, ids)
				}
				total += len(ids)
				got := res.Embeddings[i]
				want := wantEmbedding(t, path, ids)
				if len(got) != len(want) {
					t.Fatalf("input %d: %d values, want %d", i, len(got), len(want))
				}
				var norm float64
				for _, x := range got {
					norm += float64(x) * float64(x)
				}
				cos := cosine(want, got)
				t.Logf("%s input %d (%d tokens): cosine %.9f to one backend pass, |v| %.7f", pool, i, len(ids), cos, math.Sqrt(norm))
				if cos < 0.99999 || math.Abs(math.Sqrt(norm)-1) > 1e-5 {
					t.Errorf("input %d: cosine %.9f (want ≥ 0.99999), norm %.7f (want 1)", i, cos, math.Sqrt(norm))
				}
			}
			if res.PromptTokens != total {
				t.Errorf("prompt tokens %d, want %d", res.PromptTokens, total)
			}
			// Different texts give different vectors; but under causal
			// attention the first row sees only BOS, so CLS pooling gives
			// every text BOS's vector (as llama.cpp does too).
			same := cosine(toF64(res.Embeddings[0]), res.Embeddings[3]) > 0.9999
			if same != (pool == model.PoolCLS) {
				t.Errorf("inputs 0 and 3: same vector %v, want %v", same, pool == model.PoolCLS)
			}
		})
	}
}

func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// A pipeline of 2 and 3 ranks pools on its last rank: the same vectors as
// one rank, while a chat request runs beside the embeddings.
func TestPipelineEmbeddings(t *testing.T) {
	path := genEmbedder(t, "qwen3", model.PoolMean)
	_, one := newServerOpts(t, path, backend.Options{Threads: 1, BatchSize: 4, KVType: "f32", Parallel: 2})
	req := runnerapi.EmbedRequest{Inputs: []runnerapi.EmbedInput{{Text: "one two three four five six seven"}, {Text: "b"}, {Tokens: []int32{5, 6, 7, 8, 9, 10}}}}
	base, err := one.Embed(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, ranges := range [][][2]int{{{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}} {
		t.Run(fmt.Sprintf("%d ranks", len(ranges)), func(t *testing.T) {
			p := startPipelineN(t, path, ranges, 2)
			var wg sync.WaitGroup
			var chatErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, chatErr = p.complete(t, runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: "chat beside", MaxTokens: 6}})
			}()
			got, err := p.client.Embed(context.Background(), req)
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if chatErr != nil {
				t.Errorf("chat beside the embeddings: %v", chatErr)
			}
			for i := range req.Inputs {
				cos := cosine(toF64(base.Embeddings[i]), got.Embeddings[i])
				t.Logf("input %d: cosine %.9f to one rank", i, cos)
				if cos < 0.99999 {
					t.Errorf("input %d: cosine %.9f to one rank, want ≥ 0.99999", i, cos)
				}
			}
		})
	}
}

// Bad requests are refused before any work, and the runner goes on.
func TestServerEmbeddingsRefused(t *testing.T) {
	chat := genModel(t, "F32")
	_, c := newServerOpts(t, chat, backend.Options{Threads: 1, BatchSize: 16, KVType: "f32", ContextLen: 64})
	emb := genEmbedder(t, "llama", model.PoolLast)
	_, ce := newServerOpts(t, emb, backend.Options{Threads: 1, BatchSize: 16, KVType: "f32", ContextLen: 64})
	many := make([]runnerapi.EmbedInput, runnerapi.MaxEmbedInputs+1)
	for i := range many {
		many[i].Text = "x"
	}
	long := strings.Repeat("word ", 200)
	for _, tc := range []struct {
		name string
		c    *runnerapi.Client
		req  runnerapi.EmbedRequest
		want string
	}{
		{"chat model", c, runnerapi.EmbedRequest{Inputs: []runnerapi.EmbedInput{{Text: "hi"}}}, "not an embedding model"},
		{"no inputs", ce, runnerapi.EmbedRequest{}, "no inputs"},
		{"too many", ce, runnerapi.EmbedRequest{Inputs: many}, "at most 2048"},
		{"token out of range", ce, runnerapi.EmbedRequest{Inputs: []runnerapi.EmbedInput{{Tokens: []int32{1, 99999}}}}, "token 1 is 99999"},
		{"too long", ce, runnerapi.EmbedRequest{Inputs: []runnerapi.EmbedInput{{Text: long}}}, "the context holds 64"},
	} {
		_, err := tc.c.Embed(context.Background(), tc.req)
		var re *runnerapi.RequestError
		if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(re.Error(), tc.want) {
			t.Errorf("%s: %v, want a 400 saying %q", tc.name, err, tc.want)
		}
	}
	res, err := ce.Embed(context.Background(), runnerapi.EmbedRequest{Inputs: []runnerapi.EmbedInput{{Text: long}}, Truncate: true})
	if err != nil || res.PromptTokens != 64 {
		t.Fatalf("truncated: %v, %+v tokens, want 64", err, res)
	}
}
