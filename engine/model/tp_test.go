package model

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// tpFile is a model directory (no data) whose first block's output and
// down projections have type typ.
func tpFile(typ gguf.TensorType) *gguf.File {
	return &gguf.File{Tensors: []gguf.TensorInfo{{Name: "blk.0.attn_output.weight", Type: typ}, {Name: "blk.0.ffn_down.weight", Type: typ}}}
}

func TestPlanTP(t *testing.T) {
	type want struct{ heads, kv, kvFirst, ff []int }
	for _, c := range []struct {
		name  string
		cfg   Config
		typ   gguf.TensorType
		ranks int
		want  want
	}{
		{"even", Config{Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128, FFDim: 8192}, gguf.Q4_K, 2,
			want{[]int{16, 16}, []int{4, 4}, []int{0, 4}, []int{4096, 4096}}},
		{"uneven, K-quant blocks", Config{Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128, FFDim: 8192}, gguf.Q4_K, 3,
			want{[]int{12, 12, 8}, []int{3, 3, 2}, []int{0, 3, 6}, []int{2816, 2816, 2560}}},
		{"kv heads shared", Config{Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 64, FFDim: 512}, gguf.Q8_0, 4,
			want{[]int{2, 2, 2, 2}, []int{1, 1, 1, 1}, []int{0, 0, 1, 1}, []int{128, 128, 128, 128}}},
		{"groups joined to fill blocks", Config{Layers: 2, Heads: 16, KVHeads: 8, HeadDim: 64, FFDim: 1024}, gguf.Q4_K, 2,
			want{[]int{8, 8}, []int{4, 4}, []int{0, 4}, []int{512, 512}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan, err := PlanTP(tpFile(c.typ), c.cfg, c.ranks)
			if err != nil {
				t.Fatal(err)
			}
			var got want
			head, ff := 0, 0
			for r, s := range plan {
				got.heads, got.kv, got.kvFirst, got.ff = append(got.heads, s.Heads), append(got.kv, s.KVHeads), append(got.kvFirst, s.KVHead), append(got.ff, s.FFDim)
				if s.Rank != r || s.Head != head || s.FF != ff {
					t.Errorf("rank %d: %+v does not follow the one before", r, s)
				}
				head, ff = head+s.Heads, ff+s.FFDim
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("plan %+v, want %+v", got, c.want)
			}
			if head != c.cfg.Heads || ff != c.cfg.FFDim {
				t.Errorf("the plan covers %d heads and %d columns of %d and %d", head, ff, c.cfg.Heads, c.cfg.FFDim)
			}
		})
	}
	for _, c := range []struct {
		name  string
		cfg   Config
		ranks int
		says  string
	}{
		{"one rank", Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512}, 1, "1 ranks"},
		{"too many ranks", Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512}, 17, "17 ranks"},
		{"mixture of experts", Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512, Experts: 8, Arch: "qwen3moe"}, 2, "expert"},
		{"latent attention", Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512, MLA: true, Arch: "deepseek2"}, 2, "latent"},
		{"kv heads not shareable", Config{Heads: 8, KVHeads: 2, HeadDim: 64, FFDim: 512}, 3, "2 kv heads"},
		{"more ranks than groups", Config{Heads: 8, KVHeads: 4, HeadDim: 64, FFDim: 512}, 3, "4 kv heads"},
		{"MLP not in blocks", Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 500}, 2, "500 columns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			typ := gguf.Q8_0
			if c.name == "more ranks than groups" {
				typ = gguf.Q4_K // a group of 2 heads of 64 is half a block
			}
			_, err := PlanTP(tpFile(typ), c.cfg, c.ranks)
			if !errors.Is(err, ErrTPSplit) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("PlanTP = %v, want ErrTPSplit naming %q", err, c.says)
			}
		})
	}
}
