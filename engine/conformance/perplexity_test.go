package conformance

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/bench"
	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// The trained KJV target and the text it never saw (models/kjv).
var (
	kjvTarget  = filepath.Join("..", "..", "models", "kjv", "kjv-target-f16.gguf")
	kjvHeldout = filepath.Join("..", "..", "models", "kjv", "heldout.txt")
)

// perplexityChunks bounds both engines' runs (of 256 tokens; the held-out
// text has 186): about a minute for the four types.
const perplexityChunks = 64

// The trained target's perplexity on the held-out text, as Orrery computes
// it (bench.Perplexity, what orrery perplexity prints) and as
// llama-perplexity does, on the same files at both engines' defaults
// (flash attention, f16 KV cache, repacking): the same to 4 significant
// digits for F32, F16, Q8_0 and Q4_K_M (the last two from llama-quantize).
// Both tokenize the text into the same ids first.
func TestPerplexityMatchesLlamaCpp(t *testing.T) {
	dir := llamaref.Require(t, "bin/llama-perplexity", "bin/llama-quantize", "bin/llama-tokenize")
	text, err := os.ReadFile(kjvHeldout)
	if err != nil {
		t.Fatal(err)
	}
	sameTokens(t, dir, string(text))
	tmp := t.TempDir()
	load := func(ctx context.Context, p string, o backend.Options, pr func(float32)) (backend.Rank, error) {
		return ggml.Load(ctx, p, o, pr)
	}
	var lines []string
	for _, typ := range []string{"F32", "F16", "Q8_0", "Q4_K_M"} {
		path := kjvTarget
		if typ != "F16" {
			path = filepath.Join(tmp, typ+".gguf")
			quantize(t, dir, kjvTarget, path, typ)
		}
		ref := llamaPerplexity(t, dir, path)
		got, err := bench.Perplexity(context.Background(), path, string(text), 256, perplexityChunks, backend.Options{Threads: threads, KVType: "f16"}, load, nil)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		rel := math.Abs(got.Perplexity-ref) / ref
		lines = append(lines, typ+": Orrery "+strconv.FormatFloat(got.Perplexity, 'f', 4, 64)+", llama.cpp "+strconv.FormatFloat(ref, 'f', 4, 64)+
			", relative difference "+strconv.FormatFloat(rel, 'e', 1, 64))
		// 4 significant digits: within half a unit of the 4th.
		if rel > 5e-4 {
			t.Errorf("%s: perplexity %.4f, llama-perplexity %.4f: not the same to 4 digits", typ, got.Perplexity, ref)
		}
		if got.Chunks != perplexityChunks || got.Scored != perplexityChunks*127 {
			t.Errorf("%s: %d chunks, %d scored: want %d and %d", typ, got.Chunks, got.Scored, perplexityChunks, perplexityChunks*127)
		}
	}
	t.Logf("held-out perplexity, %d chunks of 256:\n%s", perplexityChunks, strings.Join(lines, "\n"))
}

// llamaPerplexity is llama-perplexity's final estimate for the held-out text.
func llamaPerplexity(t *testing.T, dir, path string) float64 {
	t.Helper()
	out, err := exec.Command(llamaref.Bin(dir, "llama-perplexity"), "-m", path, "-f", kjvHeldout, "-c", "256", "-b", "256",
		"--chunks", strconv.Itoa(perplexityChunks), "-t", strconv.Itoa(threads)).CombinedOutput()
	m := regexp.MustCompile(`Final estimate: PPL = ([\d.]+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("llama-perplexity on %s: %v\n%s", filepath.Base(path), err, tail(out))
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// sameTokens: Orrery's tokenizer and llama-tokenize give the same ids for
// the held-out text (what both perplexities are over).
func sameTokens(t *testing.T, dir, text string) {
	t.Helper()
	out, err := exec.Command(llamaref.Bin(dir, "llama-tokenize"), "-m", kjvTarget, "-f", kjvHeldout, "--ids", "--log-disable").Output()
	var ref []int32
	if err == nil {
		err = json.Unmarshal(out, &ref)
	}
	if err != nil {
		t.Fatalf("llama-tokenize: %v\n%s", err, tail(out))
	}
	got, err := modeltest.Tokenizer(t, kjvTarget).Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ref) {
		i := 0
		for i < min(len(got), len(ref)) && got[i] == ref[i] {
			i++
		}
		t.Fatalf("the held-out text tokenizes to %d ids in Orrery and %d in llama.cpp, first difference at %d", len(got), len(ref), i)
	}
}
