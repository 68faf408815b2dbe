package ggmlintegration

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/internal/reference"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/split"
)

// splits are the layer ranges of 1, 2 and 3 ranks over a 4-layer model.
var splits = [][][2]int{{{0, 4}}, {{0, 2}, {2, 4}}, {{0, 1}, {1, 3}, {3, 4}}}

// loadRanks writes one shard per range and loads each as a rank.
func loadRanks(t *testing.T, path string, ranges [][2]int) []backend.Rank {
	t.Helper()
	var ranks []backend.Rank
	for i, r := range ranges {
		shard := filepath.Join(t.TempDir(), fmt.Sprintf("shard-%d.gguf", i))
		if err := split.WriteShard(path, shard, r[0], r[1], "test"); err != nil {
			t.Fatal(err)
		}
		_, cfg := modeltest.Read(t, shard)
		if a, b := cfg.Blocks(); a != r[0] || b != r[1] {
			t.Fatalf("shard holds [%d, %d), want %v", a, b, r)
		}
		rk, err := ggml.Load(context.Background(), shard, backend.Options{Threads: 2, KVType: "f32", BatchSize: 16}, nil)
		if err != nil {
			t.Fatalf("load shard [%d, %d): %v", r[0], r[1], err)
		}
		t.Cleanup(rk.Close)
		ranks = append(ranks, rk)
	}
	return ranks
}

// forward runs a batch down the ranks, hidden states from one to the next.
func forward(t *testing.T, ranks []backend.Rank, toks []int32, pos []int32, all bool) []float32 {
	t.Helper()
	b := backend.Batch{Tokens: toks, Positions: pos, AllLogits: all}
	for i, r := range ranks {
		res, err := r.Forward(context.Background(), b)
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
		if i == len(ranks)-1 {
			return res.Logits
		}
		b = backend.Batch{Hidden: res.Hidden, Positions: pos, AllLogits: all}
	}
	return nil
}

func relErr32(a, b []float32) float64 {
	var d, m float64
	for i := range b {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
		m = max(m, math.Abs(float64(b[i])))
	}
	return d / m
}

// One model split over 1, 2 and 3 ranks gives the same logits (within
// 1e-4 relative) for a prompt batch and through the KV caches, and greedy
// generation picks the same tokens.
func TestShardedRanksAgree(t *testing.T) {
	for _, typ := range []string{"F32", "Q8_0"} {
		t.Run(typ, func(t *testing.T) {
			path := genModel(t, typ)
			prompt := []int32{1, 300, 301, 302, 17, 250}
			var base [][]float32
			var baseTokens []int32
			for n, ranges := range splits {
				ranks := loadRanks(t, path, ranges)
				vocab := ranks[0].Config().Vocab
				pos := []int32{0, 1, 2, 3, 4, 5}
				logits := forward(t, ranks, prompt, pos, true)
				var steps [][]float32
				for i := range prompt {
					steps = append(steps, logits[i*vocab:(i+1)*vocab])
				}
				// Greedy, 8 tokens through the caches.
				var tokens []int32
				next := int32(reference.Argmax(steps[len(steps)-1]))
				for k := range 8 {
					tokens = append(tokens, next)
					l := forward(t, ranks, []int32{next}, []int32{int32(len(prompt) + k)}, false)
					steps = append(steps, l)
					next = int32(reference.Argmax(l))
				}
				if n == 0 {
					base, baseTokens = steps, tokens
					continue
				}
				worst := 0.0
				for i := range steps {
					worst = max(worst, relErr32(steps[i], base[i]))
				}
				t.Logf("%s, %d ranks: worst relative logit error vs 1 rank %.2e; greedy %v", typ, n+1, worst, tokens)
				if worst > 1e-4 {
					t.Errorf("%d ranks: logits differ by %.2e (relative) from 1 rank", n+1, worst)
				}
				if !slices.Equal(tokens, baseTokens) {
					t.Errorf("%d ranks: greedy %v, 1 rank %v", n+1, tokens, baseTokens)
				}
			}
		})
	}
}

// A rank cannot be asked for blocks its shard lacks.
func TestShardRange(t *testing.T) {
	path := genModel(t, "F32")
	shard := filepath.Join(t.TempDir(), "s.gguf")
	if err := split.WriteShard(path, shard, 1, 3, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := ggml.Load(context.Background(), shard, backend.Options{FirstLayer: 0, LastLayer: 3}, nil); err == nil {
		t.Fatal("loaded blocks [0, 3) from a shard of [1, 3)")
	}
	if err := split.WriteShard(shard, filepath.Join(t.TempDir(), "x.gguf"), 1, 2, "x"); err == nil {
		t.Fatal("sharded a shard")
	}
}
