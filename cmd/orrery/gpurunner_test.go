package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
)

// runnerCompletion runs a greedy completion of prompt (maxTokens tokens,
// logprobs with the 2 most likely) on a runner, and returns it as the
// legacy completions' shape (tokens named by id), which agreeUpToNearTie
// judges, with how it ended.
func runnerCompletion(t *testing.T, c *runnerapi.Client, prompt []int32, maxTokens int, noCache bool) (legacyCompletion, *runnerapi.Done) {
	t.Helper()
	req := runnerapi.CompletionRequest{Request: runnerapi.Request{PromptTokens: prompt, MaxTokens: maxTokens, IgnoreEOS: true,
		Logprobs: true, TopLogprobs: 2, NoPromptCache: noCache, Sample: sample.Options{Temperature: 0}}}
	var toks []string
	var lps []float64
	var tops []map[string]float64
	done, err := c.Complete(context.Background(), req, func(p runnerapi.Piece) error {
		if p.Token < 0 || p.Logprobs == nil {
			return nil
		}
		toks = append(toks, fmt.Sprint(p.Token))
		lps = append(lps, float64(p.Logprobs.Logprob))
		top := map[string]float64{}
		for _, x := range p.Logprobs.Top {
			top[fmt.Sprint(x.Token)] = float64(x.Logprob)
		}
		tops = append(tops, top)
		return nil
	})
	if err != nil {
		t.Fatalf("completion of %d tokens: %v", len(prompt), err)
	}
	if len(toks) != maxTokens {
		t.Fatalf("completion: %d tokens with logprobs, want %d", len(toks), maxTokens)
	}
	b, _ := json.Marshal(map[string]any{"object": "text_completion", "choices": []any{map[string]any{
		"logprobs": map[string]any{"tokens": toks, "token_logprobs": lps, "top_logprobs": tops}}}})
	var lc legacyCompletion
	if err := json.Unmarshal(b, &lc); err != nil {
		t.Fatal(err)
	}
	return lc, done
}

// gpuPrompt is a prompt of n token ids of the tiny model's vocabulary,
// which seed varies.
func gpuPrompt(n, seed int) []int32 {
	p := []int32{1}
	for i := 1; i < n; i++ {
		p = append(p, int32(3+(i*37+seed*101)%500))
	}
	return p
}

// A runner with every block on the GPU serves what the CPU's serves, for
// each path a rank's cache and scheduler take: a first request (the KV
// cache), a second extending it (the prefix cache and the slot reused:
// its tokens found cached, the same answer as without the cache), four at
// once (continuous batching: each the answer it gets alone), with flash
// attention on and off; and embeddings. Greedy answers agree up to a
// near-tie (the GPU multiplies a batch's activations in F16, where the
// CPU keeps F32). One runner process per configuration.
func TestGPURunnerPaths(t *testing.T) {
	needGPU(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.gguf")
	if err := model.Generate(path, model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	layers := model.Presets["tiny"].Layers
	common := []string{"--parallel", "4", "--ctx", "512", "--kv-type", "f16"}
	cpu := startTPRunner(t, bin, path, append(common, "--gpu-layers", "0")...)
	cpu.ready(t)
	first, second := gpuPrompt(40, 1), []int32(nil)
	ref1, _ := runnerCompletion(t, cpu.client, first, 24, false)
	for _, tok := range ref1.Choices[0].Logprobs.Tokens {
		var id int32
		fmt.Sscan(tok, &id)
		second = append(second, id)
	}
	second = append(append(append([]int32{}, first...), second...), gpuPrompt(12, 2)[1:]...)
	ref2, _ := runnerCompletion(t, cpu.client, second, 16, false)

	for _, fa := range []struct {
		name  string
		flags []string
	}{{"flash attention", nil}, {"no flash attention", []string{"--no-flash-attn"}}} {
		t.Run(fa.name, func(t *testing.T) {
			g := startTPRunner(t, bin, path, append(append(common, "--gpu-layers", "auto", "--gpu-software"), fa.flags...)...)
			g.ready(t)
			h, err := g.client.Health(context.Background())
			if err != nil || h.Offload == nil || h.Offload.Device == nil || h.Offload.Blocks != layers || !h.Offload.Head {
				t.Fatalf("health %+v, %v: want every block and the head on the GPU", h.Offload, err)
			}
			// The KV cache: the first request.
			got1, _ := runnerCompletion(t, g.client, first, 24, false)
			agreeUpToNearTie(t, "the first request", got1, ref1, 0.05)
			// The prefix cache: the second request starts where the first
			// left its slot, and answers as a fresh computation does.
			got2, done := runnerCompletion(t, g.client, second, 16, false)
			if done.CachedTokens < len(first) {
				t.Errorf("the second request found %d of its %d prompt tokens cached, want ≥ the first's %d", done.CachedTokens, len(second), len(first))
			}
			fresh, fdone := runnerCompletion(t, g.client, second, 16, true)
			if fdone.CachedTokens != 0 {
				t.Errorf("without the prompt cache: %d tokens cached", fdone.CachedTokens)
			}
			agreeUpToNearTie(t, "the second request, from the cache against computed afresh", got2, fresh, 0.05)
			agreeUpToNearTie(t, "the second request against the CPU's", got2, ref2, 0.05)
			// Continuous batching: four at once, each as alone.
			var alone [4]legacyCompletion
			for i := range alone {
				alone[i], _ = runnerCompletion(t, g.client, gpuPrompt(20+3*i, 10+i), 16, true)
			}
			var together [4]legacyCompletion
			var wg sync.WaitGroup
			for i := range together {
				wg.Go(func() { together[i], _ = runnerCompletion(t, g.client, gpuPrompt(20+3*i, 10+i), 16, true) })
			}
			wg.Wait()
			for i := range together {
				agreeUpToNearTie(t, fmt.Sprintf("request %d of 4 at once", i), together[i], alone[i], 0.05)
			}
		})
	}

	// Embeddings: the same vectors, up to rounding.
	emb := filepath.Join(dir, "emb.gguf")
	if out, err := exec.Command(bin, "gen-model", "--preset", "tiny", "--arch", "qwen3", "--pooling", "last", "-o", emb).CombinedOutput(); err != nil {
		t.Fatalf("gen-model: %v\n%s", err, out)
	}
	texts := []runnerapi.EmbedInput{{Text: "the first text"}, {Text: "a second, longer text about something else entirely"}, {Text: "x"}}
	var vecs [2][]runnerapi.Vector
	for i, flags := range [][]string{{"--gpu-layers", "0"}, {"--gpu-layers", "auto", "--gpu-software"}} {
		r := startTPRunner(t, bin, emb, append(common, flags...)...)
		r.ready(t)
		res, err := r.client.Embed(context.Background(), runnerapi.EmbedRequest{Inputs: texts})
		if err != nil || len(res.Embeddings) != len(texts) {
			t.Fatalf("embed (%v): %v, %+v", flags, err, res)
		}
		vecs[i] = res.Embeddings
	}
	for i := range texts {
		c := cos32(vecs[1][i], vecs[0][i])
		t.Logf("embedding %d: cosine of the GPU's vector and the CPU's %.7f", i, c)
		if !(c >= embedCosBound) {
			t.Errorf("embedding %d: cosine %.7f of the GPU's and the CPU's, want ≥ %g", i, c, embedCosBound)
		}
	}
	if c := cos32(vecs[1][0], vecs[1][1]); c > 0.9999 {
		t.Errorf("the GPU's vectors of two different texts: cosine %.6f", c)
	}
}

// embedCosBound is the least cosine of an embedding on the GPU against
// the CPU's (the tiny model, F32): measured 0.9999994 to 0.9999997.
const embedCosBound = 0.99999
