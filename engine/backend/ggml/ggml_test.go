package ggml

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/internal/reference"
	"github.com/orrery-cluster/orrery/engine/model"
)

func gen(t *testing.T, arch, typ string) string {
	t.Helper()
	o := model.Presets["tiny"]
	o.Arch, o.Type, o.Seed = arch, typ, 7
	if arch == "glm4moe" { // its experts and conventions: a family
		var err error
		if o, err = model.ApplyFamily(o, arch); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), arch+"-"+typ+".gguf")
	if err := model.Generate(path, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// relErr is max|a−b| / max|b|.
func relErr(a []float32, b []float64) float64 {
	var d, m float64
	for i := range b {
		d = max(d, math.Abs(float64(a[i])-b[i]))
		m = max(m, math.Abs(b[i]))
	}
	return d / m
}

// The ggml path agrees with the pure-Go float64 reference: a prompt in one
// batch (every position's logits), then single-token steps through the KV
// cache, for both architectures.
func TestMatchesReference(t *testing.T) {
	prompt := []int32{1, 300, 301, 302, 17, 250, 99, 7}
	for _, c := range []struct {
		arch, typ string
		tol       float64
		noFA      bool
	}{
		{"llama", "F32", 1e-4, false},
		{"llama", "F32", 1e-4, true}, // attention as separate ops
		{"qwen2", "F32", 1e-4, false},
		// Partial rotary (8 of 16 dims), q/k norms and biases, a dense
		// block, then sigmoid-routed and shared experts; an MTP block
		// after the trunk that neither computes.
		{"glm4moe", "F32", 1e-4, false},
		{"glm4moe", "F32", 1e-4, true},
		{"llama", "Q8_0", 5e-2, false}, // ggml quantizes activations to 8 bits for Q8_0 weights
	} {
		name := c.arch + "-" + c.typ
		if c.noFA {
			name += "-noFA"
		}
		t.Run(name, func(t *testing.T) {
			path := gen(t, c.arch, c.typ)
			ref, err := reference.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Load(context.Background(), path, backend.Options{Threads: 2, KVType: "f32", BatchSize: 16, NoFlashAttention: c.noFA}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			vocab := r.Config().Vocab
			// Prefill the first 5 tokens in one batch, all logits.
			pos := []int32{0, 1, 2, 3, 4}
			res, err := r.Forward(context.Background(), backend.Batch{Tokens: prompt[:5], Positions: pos, AllLogits: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Logits) != 5*vocab {
				t.Fatalf("%d logits, want %d", len(res.Logits), 5*vocab)
			}
			worst := 0.0
			for i := 0; i < 5; i++ {
				want := ref.Step(prompt[i], i)
				got := res.Logits[i*vocab : (i+1)*vocab]
				worst = max(worst, relErr(got, want))
				if reference.Argmax(got) != reference.Argmax(want) {
					t.Errorf("position %d: argmax %d, reference %d", i, reference.Argmax(got), reference.Argmax(want))
				}
			}
			// Then token by token through the cache.
			for i := 5; i < len(prompt); i++ {
				res, err := r.Forward(context.Background(), backend.Batch{Tokens: prompt[i : i+1], Positions: []int32{int32(i)}})
				if err != nil {
					t.Fatal(err)
				}
				want := ref.Step(prompt[i], i)
				worst = max(worst, relErr(res.Logits, want))
				if reference.Argmax(res.Logits) != reference.Argmax(want) {
					t.Errorf("position %d: argmax %d, reference %d", i, reference.Argmax(res.Logits), reference.Argmax(want))
				}
			}
			t.Logf("%s %s: worst relative logit error %.2e (tolerance %.0e)", c.arch, c.typ, worst, c.tol)
			if worst > c.tol {
				t.Errorf("relative error %.3e over %.0e", worst, c.tol)
			}
			// After Reset, position 0 again gives the first logits.
			if err := r.Reset(); err != nil {
				t.Fatal(err)
			}
			res, err = r.Forward(context.Background(), backend.Batch{Tokens: prompt[:1], Positions: []int32{0}})
			ref.Reset()
			if want := ref.Step(prompt[0], 0); err != nil || relErr(res.Logits, want) > c.tol {
				t.Errorf("after Reset: %v, error %.2e", err, relErr(res.Logits, want))
			}
		})
	}
}

// glm4moe's multi-token-prediction block is neither loaded as a block nor
// computed: a file with one gives the same logits, to the bit, as the same
// trunk without it (as GLM-4.5's converter writes with --no-mtp).
func TestGLM4MoEIgnoresMTPBlock(t *testing.T) {
	prompt := []int32{1, 300, 301, 302, 17, 250}
	logits := map[int][]float32{}
	for _, nextn := range []int{1, 0} {
		o, err := model.ApplyFamily(model.Presets["tiny"], "glm4moe")
		if err != nil {
			t.Fatal(err)
		}
		o.Type, o.Seed, o.NextN = "F32", 7, nextn
		path := filepath.Join(t.TempDir(), "glm4moe.gguf")
		if err := model.Generate(path, o); err != nil {
			t.Fatal(err)
		}
		r, err := Load(context.Background(), path, backend.Options{Threads: 2, KVType: "f32", BatchSize: 8}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c := r.Config(); c.Layers != 4 || c.NextN != nextn || len(r.layers) != 4 {
			t.Errorf("MTP blocks %d: %d layers, %d MTP, %d blocks loaded", nextn, c.Layers, c.NextN, len(r.layers))
		}
		res, err := r.Forward(context.Background(), backend.Batch{Tokens: prompt, Positions: []int32{0, 1, 2, 3, 4, 5}, AllLogits: true})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		logits[nextn] = res.Logits
	}
	if len(logits[0]) == 0 || !slices.Equal(logits[0], logits[1]) {
		t.Errorf("the MTP block changed the logits (%d and %d values)", len(logits[1]), len(logits[0]))
	}
}

func TestForwardChecksInput(t *testing.T) {
	r, err := Load(context.Background(), gen(t, "llama", "F32"), backend.Options{Threads: 1, BatchSize: 4, ContextLen: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		b    backend.Batch
		want string
	}{
		{backend.Batch{}, "batch of 0"},
		{backend.Batch{Tokens: []int32{1, 2, 3, 4, 5}, Positions: []int32{0, 1, 2, 3, 4}}, "batch of 5"},
		{backend.Batch{Tokens: []int32{1}, Positions: []int32{0, 1}}, "1 tokens for 2"},
		{backend.Batch{Tokens: []int32{100000}, Positions: []int32{0}}, "outside the 512-token"},
		{backend.Batch{Tokens: []int32{1}, Positions: []int32{8}}, "outside the context of 8"},
		{backend.Batch{Tokens: []int32{1}, Positions: []int32{0}, Seqs: []int{1}}, "sequence 1 of 1"},
		{backend.Batch{Tokens: []int32{1, 2}, Positions: []int32{0, 1}, Seqs: []int{0}}, "1 sequence ids for 2"},
		{backend.Batch{Tokens: []int32{1}, Positions: []int32{0}, Outputs: []int32{1}}, "output row 1 of 1"},
	} {
		if _, err := r.Forward(context.Background(), c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.b, err, c.want)
		}
	}
	if _, err := Load(context.Background(), filepath.Join(t.TempDir(), "none.gguf"), backend.Options{}, nil); err == nil {
		t.Error("a missing file loaded")
	}
	if _, err := Load(context.Background(), gen(t, "llama", "F32"), backend.Options{FirstLayer: 3, LastLayer: 9}, nil); err == nil || !strings.Contains(err.Error(), "layers [3, 9)") {
		t.Errorf("bad range: %v", err)
	}
}

// Sequences batched together get the logits each gets alone: two prompts
// prefilled in one batch, then decoded in one batch of two rows, against
// each run by itself; a kept prefix (Remove from k) continues as if the
// prompt had been run again.
func TestSequencesBatched(t *testing.T) {
	ctx := context.Background()
	path := gen(t, "llama", "F32")
	r, err := Load(ctx, path, backend.Options{Threads: 1, Parallel: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	a, b := []int32{1, 300, 301, 302, 17}, []int32{1, 250, 99}
	vocab := r.Config().Vocab
	alone := func(seq int, prompt []int32, next int32) (pre, dec []float32) {
		t.Helper()
		if err := r.Remove(seq, 0); err != nil {
			t.Fatal(err)
		}
		res, err := r.Forward(ctx, backend.Batch{Tokens: prompt, Positions: positionsFrom(0, len(prompt)), Seqs: fill(seq, len(prompt))})
		if err != nil {
			t.Fatal(err)
		}
		res2, err := r.Forward(ctx, backend.Batch{Tokens: []int32{next}, Positions: []int32{int32(len(prompt))}, Seqs: []int{seq}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Logits, res2.Logits
	}
	preA, decA := alone(0, a, 5)
	preB, decB := alone(1, b, 6)
	for seq := range 3 {
		r.Remove(seq, 0)
	}
	both := backend.Batch{Tokens: append(append([]int32{}, a...), b...), Positions: append(positionsFrom(0, len(a)), positionsFrom(0, len(b))...),
		Seqs: append(fill(1, len(a)), fill(2, len(b))...), Outputs: []int32{int32(len(a) - 1), int32(len(a) + len(b) - 1)}}
	res, err := r.Forward(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := r.Forward(ctx, backend.Batch{Tokens: []int32{6, 5}, Positions: []int32{int32(len(b)), int32(len(a))}, Seqs: []int{2, 1},
		Outputs: []int32{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Logits) != 2*vocab || len(res2.Logits) != 2*vocab {
		t.Fatalf("%d and %d logits, want 2×%d", len(res.Logits), len(res2.Logits), vocab)
	}
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"prefill a", res.Logits[:vocab], preA}, {"prefill b", res.Logits[vocab:], preB}, {"decode b", res2.Logits[:vocab], decB}, {"decode a", res2.Logits[vocab:], decA}} {
		// f16 keys and values, summed in another order: the same logits
		// within 1e-4 of their scale.
		if e := maxDiff(c.got, c.want) / maxAbs(c.want); e > 1e-4 {
			t.Errorf("%s batched vs alone: relative diff %g", c.name, e)
		}
	}
	// Keep a's first 3 positions in sequence 1 and run the rest again.
	if err := r.Remove(1, 3); err != nil {
		t.Fatal(err)
	}
	res, err = r.Forward(ctx, backend.Batch{Tokens: a[3:], Positions: positionsFrom(3, len(a)), Seqs: fill(1, len(a)-3)})
	if err != nil {
		t.Fatal(err)
	}
	if e := maxDiff(res.Logits, preA) / maxAbs(preA); e > 1e-4 {
		t.Errorf("prefix kept: relative diff %g from the whole prompt's logits", e)
	}
	if err := r.Remove(3, 0); err == nil {
		t.Error("Remove of sequence 3 of 3 passed")
	}
	// Positions from a peer's frame: none below 0 or past int32, the
	// cache's type, whose wrap would edit other positions.
	if err := r.Remove(1, -1); err == nil {
		t.Error("Remove from position -1 passed")
	}
	if err := r.Remove(1, math.MaxInt32+1); err == nil {
		t.Error("Remove from position 2^31 passed")
	}
	if err := r.Shift(1, math.MaxInt32-1, 2); err == nil {
		t.Error("Shift past position 2^31 passed")
	}
}

func positionsFrom(i, j int) []int32 {
	p := make([]int32, 0, j-i)
	for k := i; k < j; k++ {
		p = append(p, int32(k))
	}
	return p
}

func fill(seq, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = seq
	}
	return s
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func maxAbs(a []float32) float64 {
	var m float64
	for _, v := range a {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// A context shift re-rotates the kept keys as if computed at their new
// positions: in a one-block model (whose keys and values depend on their
// token alone: deeper blocks' would also on the dropped tokens), after
// dropping positions 2–4 of 8, the next token's logits are those of a
// fresh prefill of the 5 kept tokens up to rounding; for whole-head RoPE
// (llama, NeoX qwen2) and glm4moe's partial one, where rotating the whole
// head moves them O(1).
func TestShiftMatchesPrefill(t *testing.T) {
	prompt := []int32{1, 300, 301, 302, 17, 250, 99, 7}
	kept := []int32{1, 300, 250, 99, 7}
	next := int32(42)
	for _, arch := range []string{"llama", "qwen2", "glm4moe"} {
		t.Run(arch, func(t *testing.T) {
			o, err := model.ApplyFamily(model.Presets["tiny"], arch)
			if err != nil {
				t.Fatal(err)
			}
			o.Layers, o.Seed = 1, 7
			path := filepath.Join(t.TempDir(), arch+".gguf")
			if err := model.Generate(path, o); err != nil {
				t.Fatal(err)
			}
			opts := backend.Options{Threads: 2, KVType: "f32", BatchSize: 8}
			run := func(tokens []int32, shift bool) []float64 {
				r, err := Load(context.Background(), path, opts, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				pos := make([]int32, len(tokens))
				for i := range pos {
					pos[i] = int32(i)
				}
				if _, err := r.Forward(context.Background(), backend.Batch{Tokens: tokens, Positions: pos}); err != nil {
					t.Fatal(err)
				}
				at := int32(len(tokens))
				if shift {
					if err := r.Shift(0, 2, 3); err != nil {
						t.Fatal(err)
					}
					at -= 3
				}
				res, err := r.Forward(context.Background(), backend.Batch{Tokens: []int32{next}, Positions: []int32{at}})
				if err != nil {
					t.Fatal(err)
				}
				out := make([]float64, len(res.Logits))
				for i, v := range res.Logits {
					out[i] = float64(v)
				}
				return out
			}
			want, got := run(kept, false), run(prompt, true)
			g := make([]float32, len(got))
			for i, v := range got {
				g[i] = float32(v)
			}
			if e := relErr(g, want); e > 1e-4 {
				t.Errorf("after the shift: relative logit error %.2e against a fresh prefill, want ≤ 1e-4", e)
			} else {
				t.Logf("after the shift: relative logit error %.2e against a fresh prefill", e)
			}
		})
	}
}
