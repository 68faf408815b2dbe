package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// embedTexts are the inputs both engines embed: short and long, one
// longer than a batch of Orrery's (so that its prompt goes in chunks).
var embedTexts = []string{
	"hello",
	"The quick brown fox jumps over the lazy dog.",
	"Embeddings map text to vectors whose cosine says how alike two texts are.",
	"a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j k l m n o p q r s t u v w x y z",
	"Orrery runs one model across several machines.",
	"x",
}

// embedRows are the embedding models under test: the families the issue
// names (llama-style, qwen3 as Qwen3-Embedding) and gemma3 computed
// causally, as llama.cpp's gemma3 architecture does; each pooling type.
var embedRows = []struct {
	family string
	pool   model.Pooling
	types  []string
}{
	{"llama", model.PoolMean, []string{"F32", "Q8_0", "Q4_K_M"}},
	{"llama", model.PoolCLS, []string{"F32"}},
	{"llama", model.PoolLast, []string{"F32"}},
	{"qwen3", model.PoolLast, []string{"F32", "Q8_0", "Q4_K_M"}},
	{"qwen3", model.PoolMean, []string{"F32"}},
	{"gemma3", model.PoolMean, []string{"F32", "Q8_0"}},
}

// TestEmbeddingsMatchLlamaCpp embeds the same texts with Orrery's runner
// (its scheduler in 4 slots, batches of 16 rows) and llama.cpp's
// llama-embedding on the same file, both at their defaults (flash
// attention, f16 KV cache, repacking), and compares every vector: cosine
// ≥ 0.99999 for F32; for the quantized types, whose kernels differ between
// the two ggml builds, max |Δ| / std within the logits' bound (0.3).
func TestEmbeddingsMatchLlamaCpp(t *testing.T) {
	dir := llamaref.Require(t, "bin/llama-embedding", "bin/llama-quantize")
	t.Log("| family | pooling | type | min cosine | max abs Δ / std |")
	t.Log("|---|---|---|---|---|")
	for _, er := range embedRows {
		o, err := model.ApplyFamily(shape, er.family)
		if err != nil {
			t.Fatal(err)
		}
		o.Type, o.Pooling = "F32", er.pool
		f32 := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%s-F32.gguf", er.family, er.pool))
		if err := model.Generate(f32, o); err != nil {
			t.Fatal(err)
		}
		for _, typ := range er.types {
			path := f32
			switch typ {
			case "F32":
			case "Q8_0":
				o.Type = typ
				path = filepath.Join(t.TempDir(), fmt.Sprintf("%s-%s-%s.gguf", er.family, er.pool, typ))
				if err := model.Generate(path, o); err != nil {
					t.Fatal(err)
				}
			default:
				path = filepath.Join(t.TempDir(), fmt.Sprintf("%s-%s-%s.gguf", er.family, er.pool, typ))
				quantize(t, dir, f32, path, typ)
			}
			ref := llamaEmbed(t, dir, path, embedTexts)
			got := orreryEmbed(t, path, embedTexts, 4)
			minCos, maxDelta := 1.0, 0.0
			for i := range embedTexts {
				c, d := compareVectors(ref[i], got[i])
				minCos, maxDelta = math.Min(minCos, c), math.Max(maxDelta, d)
			}
			t.Logf("| %s | %s | %s | %.7f | %.3g |", er.family, er.pool, typ, minCos, maxDelta)
			if typ == "F32" && minCos < 0.99999 {
				t.Errorf("%s %s %s: cosine %.7f to llama.cpp, want ≥ 0.99999", er.family, er.pool, typ, minCos)
			}
			if maxDelta > 0.3 {
				t.Errorf("%s %s %s: max |Δ| / std %.3g to llama.cpp, want ≤ 0.3", er.family, er.pool, typ, maxDelta)
			}
		}
	}
}

// compareVectors is the cosine of two vectors and their largest
// difference over the reference's standard deviation.
func compareVectors(ref, got []float32) (cos, maxDelta float64) {
	var ab, aa, bb, mean float64
	for i := range ref {
		a, b := float64(ref[i]), float64(got[i])
		ab, aa, bb, mean = ab+a*b, aa+a*a, bb+b*b, mean+a
	}
	mean /= float64(len(ref))
	var v float64
	for i := range ref {
		d := float64(ref[i]) - mean
		v += d * d
		maxDelta = math.Max(maxDelta, math.Abs(float64(ref[i])-float64(got[i])))
	}
	return ab / math.Sqrt(aa*bb), maxDelta / math.Sqrt(v/float64(len(ref)))
}

// llamaEmbed runs llama-embedding on texts (one per line) and reads its
// JSON: one vector per text, L2-normalised, at 7 decimals. llama.cpp
// prints the JSON through its asynchronous logger, and CI has seen runs
// exit 0 having printed nothing, or only part of it: a run whose output
// does not parse into one vector per text is tried again, 4 tries in all.
func llamaEmbed(t testing.TB, dir, path string, texts []string) [][]float32 {
	t.Helper()
	const tries = 4
	for try := 1; ; try++ {
		cmd := exec.Command(llamaref.Bin(dir, "llama-embedding"), "-m", path, "-p", strings.Join(texts, "\n"), "-t", strconv.Itoa(threads),
			"-c", "512", "-fa", "on", "--embd-output-format", "json")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("llama-embedding on %s: %v\n%s", filepath.Base(path), err, tail([]byte(stderr.String())))
		}
		vecs, err := parseLlamaEmbed(out, len(texts))
		if err == nil {
			return vecs
		}
		if try == tries {
			t.Fatalf("llama-embedding on %s, %d tries: %v\n%s\nstderr:\n%s", filepath.Base(path), tries, err, tail(out), tail([]byte(stderr.String())))
		}
		t.Logf("llama-embedding on %s (try %d of %d): %v, %d bytes printed; trying again", filepath.Base(path), try, tries, err, len(out))
	}
}

// parseLlamaEmbed reads llama-embedding's JSON: n vectors, by index.
func parseLlamaEmbed(out []byte, n int) ([][]float32, error) {
	var v struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("output does not parse: %w", err)
	}
	if len(v.Data) != n {
		return nil, fmt.Errorf("%d vectors for %d texts", len(v.Data), n)
	}
	vecs := make([][]float32, n)
	for _, d := range v.Data {
		if d.Index < 0 || d.Index >= n || vecs[d.Index] != nil || len(d.Embedding) == 0 {
			return nil, fmt.Errorf("vector with index %d (of %d texts), %d values: out of range, repeated or empty", d.Index, n, len(d.Embedding))
		}
		vecs[d.Index] = d.Embedding
	}
	return vecs, nil
}

// orreryEmbed embeds texts through a runner server on one rank, with
// parallel slots.
func orreryEmbed(t testing.TB, path string, texts []string, parallel int) [][]float32 {
	t.Helper()
	res := orreryEmbedRes(t, newEmbedServer(t, path, parallel, 16), texts)
	out := make([][]float32, len(res.Embeddings))
	for i, v := range res.Embeddings {
		out[i] = v
	}
	return out
}

func newEmbedServer(t testing.TB, path string, parallel, batch int) *runnerapi.Client {
	t.Helper()
	load := func(ctx context.Context, path string, opts backend.Options, progress func(float32)) (backend.Rank, error) {
		return ggml.Load(ctx, path, opts, progress)
	}
	s := runner.NewServer(runner.Config{ModelPath: path, Load: load, Token: "t", Node: "n",
		Options: backend.Options{Threads: threads, BatchSize: batch, Parallel: parallel}})
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &runnerapi.Client{Addr: strings.TrimPrefix(hs.URL, "http://"), Token: "t"}
}

func orreryEmbedRes(t testing.TB, c *runnerapi.Client, texts []string) *runnerapi.EmbedResponse {
	t.Helper()
	req := runnerapi.EmbedRequest{}
	for _, s := range texts {
		req.Inputs = append(req.Inputs, runnerapi.EmbedInput{Text: s})
	}
	res, err := c.Embed(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// embedBenchTexts are 64 short texts (8 to 20 tokens).
func embedBenchTexts() []string {
	subjects := []string{"The cluster", "A small model", "Every node", "The trace window", "Our benchmark", "The pipeline", "A tensor group", "The agent"}
	verbs := []string{"measures the link between two machines", "loads its weights from a local file", "answers a question about the weather in Paris today",
		"records spans for every rank", "splits attention heads across ranks", "pools the hidden states of a sentence", "keeps its cache warm", "runs on a laptop"}
	var out []string
	for i := range 64 {
		out = append(out, fmt.Sprintf("%s %s (%d).", subjects[i%8], verbs[(i/8+i)%8], i))
	}
	return out
}

// BenchmarkEmbed64 embeds 64 short texts with Orrery's runner (4 slots, as
// an agent's instance by default, and 64) and with llama.cpp's
// llama-embedding on the same file in the same run; it reports each one's
// milliseconds and the ratio. llama.cpp's time is its own "prompt eval"
// (no model load); Orrery's is the whole /embed request (tokenizing and
// HTTP included). The model is $ORRERY_EMBED_BENCH_MODEL, or one written
// once in Qwen3-Embedding-0.6B's shape (28 layers, dim 1024, Q8_0, last
// pooling) under the reference's cache.
//
//	go test -run '^$' -bench Embed64 -benchtime 3x ./engine/conformance/
func BenchmarkEmbed64(b *testing.B) {
	dir := llamaref.Require(b, "bin/llama-embedding")
	path := embedBenchModel(b, dir)
	texts := embedBenchTexts()
	for _, parallel := range []int{4, 64} {
		b.Run(fmt.Sprintf("slots=%d", parallel), func(b *testing.B) {
			c := newEmbedServer(b, path, parallel, 512)
			orreryEmbedRes(b, c, texts[:4]) // warm up
			var ours, theirs float64
			for b.Loop() {
				res := orreryEmbedRes(b, c, texts)
				ours += float64(res.Ns) / 1e6
				theirs += llamaEmbedMs(b, dir, path, texts)
			}
			n := float64(b.N)
			b.ReportMetric(ours/n, "orrery-ms")
			b.ReportMetric(theirs/n, "llama-ms")
			b.ReportMetric(ours/theirs, "ratio")
		})
	}
}

// embedBenchModel is the benchmark's model file.
func embedBenchModel(b *testing.B, dir string) string {
	if p := os.Getenv("ORRERY_EMBED_BENCH_MODEL"); p != "" {
		return p
	}
	path := filepath.Join(dir, "..", "embed-bench", "qwen3-emb-0.6b-shape-q8.gguf")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	o, err := model.ApplyFamily(model.GenOptions{Layers: 28, Dim: 1024, FFDim: 3072, Heads: 16, KVHeads: 8, Vocab: 32000, ContextLen: 4096, Seed: 7}, "qwen3")
	if err != nil {
		b.Fatal(err)
	}
	o.Type, o.Pooling = "Q8_0", model.PoolLast
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := model.Generate(tmp, o); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// llamaEmbedMs runs llama-embedding on texts and returns how long it
// took to embed them, in milliseconds. This build prints no perf counters,
// so it is the process's wall time from the timestamp of its first
// batch_decode log line (elapsed since it started logging, after the
// model loaded) to its exit, less the wall time of a bare start and exit
// (--version): embedding, printing the vectors and freeing the model.
func llamaEmbedMs(b *testing.B, dir, path string, texts []string) float64 {
	bin := llamaref.Bin(dir, "llama-embedding")
	t0 := time.Now()
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
		b.Fatalf("llama-embedding --version: %v\n%s", err, out)
	}
	bare := time.Since(t0)
	cmd := exec.Command(bin, "-m", path, "-p", strings.Join(texts, "\n"), "-t", strconv.Itoa(threads),
		"-c", "4096", "-fa", "on", "--embd-output-format", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if _, err := cmd.Output(); err != nil {
		b.Fatalf("llama-embedding: %v\n%s", err, tail([]byte(stderr.String())))
	}
	total := time.Since(start)
	for _, line := range strings.Split(stderr.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "batch_decode:" {
			continue
		}
		var mins, secs, ms, us int
		if _, err := fmt.Sscanf(f[0], "%d.%d.%d.%d", &mins, &secs, &ms, &us); err != nil {
			b.Fatalf("llama-embedding's log time %q: %v", f[0], err)
		}
		at := time.Duration(mins)*time.Minute + time.Duration(secs)*time.Second + time.Duration(ms)*time.Millisecond + time.Duration(us)*time.Microsecond
		return float64((total - at - bare).Microseconds()) / 1e3
	}
	b.Fatalf("llama-embedding logged no batch_decode:\n%s", tail([]byte(stderr.String())))
	return 0
}
