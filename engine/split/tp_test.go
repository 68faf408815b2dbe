package split

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
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
		cfg   model.Config
		typ   gguf.TensorType
		ranks int
		want  want
	}{
		{"even", model.Config{Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128, FFDim: 8192}, gguf.Q4_K, 2,
			want{[]int{16, 16}, []int{4, 4}, []int{0, 4}, []int{4096, 4096}}},
		{"uneven, K-quant blocks", model.Config{Layers: 2, Heads: 32, KVHeads: 8, HeadDim: 128, FFDim: 8192}, gguf.Q4_K, 3,
			want{[]int{12, 12, 8}, []int{3, 3, 2}, []int{0, 3, 6}, []int{2816, 2816, 2560}}},
		{"kv heads shared", model.Config{Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 64, FFDim: 512}, gguf.Q8_0, 4,
			want{[]int{2, 2, 2, 2}, []int{1, 1, 1, 1}, []int{0, 0, 1, 1}, []int{128, 128, 128, 128}}},
		{"groups joined to fill blocks", model.Config{Layers: 2, Heads: 16, KVHeads: 8, HeadDim: 64, FFDim: 1024}, gguf.Q4_K, 2,
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
	// The head's rows: in units of 64, evenly, the remainder on the last
	// rank; too few rows for a unit per rank: the head stays whole.
	for _, c := range []struct {
		vocab, ranks int
		want         []int
	}{{32000, 2, []int{16000, 16000}}, {32000, 3, []int{10688, 10688, 10624}}, {4100, 2, []int{2048, 2052}}, {100, 2, []int{0, 0}}} {
		cfg := model.Config{Layers: 2, Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512, Vocab: c.vocab}
		plan, err := PlanTP(tpFile(gguf.Q8_0), cfg, c.ranks)
		if err != nil {
			t.Fatal(err)
		}
		at := 0
		for r, s := range plan {
			if s.VocabRows != c.want[r] || s.VocabRows > 0 && s.VocabFirst != at {
				t.Errorf("vocabulary %d on %d ranks: rank %d has rows [%d, +%d), want %d from %d", c.vocab, c.ranks, r, s.VocabFirst, s.VocabRows, c.want[r], at)
			}
			at += s.VocabRows
		}
	}
	for _, c := range []struct {
		name  string
		cfg   model.Config
		ranks int
		says  string
	}{
		{"one rank", model.Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512}, 1, "1 ranks"},
		{"too many ranks", model.Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512}, 17, "17 ranks"},
		{"fewer experts than ranks", model.Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 512, Experts: 2, Arch: "qwen3moe"}, 4, "2 experts"},
		{"latent attention, too few heads", model.Config{Layers: 2, Heads: 4, KVHeads: 1, ValueDimMLA: 16, FFDim: 512, MLA: true, Arch: "deepseek2"}, 3, "4 latent-attention heads"},
		{"kv heads not shareable", model.Config{Heads: 8, KVHeads: 2, HeadDim: 64, FFDim: 512}, 3, "2 kv heads"},
		{"more ranks than groups", model.Config{Heads: 8, KVHeads: 4, HeadDim: 64, FFDim: 512}, 3, "4 kv heads"},
		{"MLP not in blocks", model.Config{Heads: 8, KVHeads: 8, HeadDim: 64, FFDim: 500}, 2, "500 columns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			typ := gguf.Q8_0
			if c.name == "more ranks than groups" {
				typ = gguf.Q4_K // a group of 2 heads of 64 is half a block
			}
			c.cfg.Layers = 2
			_, err := PlanTP(tpFile(typ), c.cfg, c.ranks)
			if !errors.Is(err, ErrTPSplit) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("PlanTP = %v, want ErrTPSplit naming %q", err, c.says)
			}
		})
	}
}

// A mixture of experts splits its heads as a dense model does and its
// experts whole and evenly; its MLP columns stay whole (no block has a
// dense MLP).
func TestPlanTPExperts(t *testing.T) {
	cfg := model.Config{Arch: "qwen3moe", Layers: 2, Heads: 8, KVHeads: 4, HeadDim: 64, FFDim: 512, Experts: 8, ExpertsUsed: 2, ExpertFFDim: 64}
	f := &gguf.File{Tensors: []gguf.TensorInfo{{Name: "blk.0.attn_output.weight", Type: gguf.Q8_0}, {Name: "blk.0.ffn_down_exps.weight", Type: gguf.Q8_0}}}
	// 64 columns are 2 blocks of Q8_0: by columns over 2 ranks, whole
	// experts over 3.
	cols, err := PlanTP(f, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	for r, s := range cols {
		if !s.ExpertColumns || s.FF != 32*r || s.FFDim != 32 || s.FullFF != 64 || s.Experts != 8 || s.Expert != 0 {
			t.Errorf("by columns, rank %d: %+v", r, s)
		}
	}
	for _, c := range []struct {
		name string
		rank int
		cut  tpCut
	}{
		{"blk.1.ffn_up_exps.weight", 1, tpCut{rows: [][2]uint64{{32, 64}}}},
		{"blk.1.ffn_down_exps.weight", 1, tpCut{cols: [][2]uint64{{32, 64}}}},
		{"blk.1.ffn_up_exps.bias", 1, tpCut{cols: [][2]uint64{{32, 64}}}},
		{"blk.1.ffn_down_exps.bias", 0, tpCut{}},
		{"blk.1.ffn_down_exps.bias", 1, tpCut{zero: true}},
	} {
		if cut, _ := tpCutFor(c.name, cfg, cols[c.rank]); cut.String() != c.cut.String() {
			t.Errorf("%s on rank %d: %s, want %s", c.name, c.rank, cut, c.cut)
		}
	}
	if _, err := PlanTPExperts(f, cfg, 3, ExpertsColumns); !errors.Is(err, ErrTPSplit) || !strings.Contains(err.Error(), "64 columns") {
		t.Errorf("64 columns by columns over 3: %v", err)
	}
	plan, err := PlanTP(f, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got [][3]int
	at := 0
	for _, s := range plan {
		got = append(got, [3]int{s.Expert, s.Experts, s.Heads})
		if s.Expert != at || s.FullExperts != 8 || s.FF != 0 || s.FFDim != 512 {
			t.Errorf("rank %d: %+v", s.Rank, s)
		}
		at += s.Experts
	}
	if fmt.Sprint(got) != "[[0 3 4] [3 3 2] [6 2 2]]" {
		t.Errorf("experts and heads by rank: %v", got)
	}
	for _, c := range []struct {
		name string
		cut  tpCut
		drop bool
	}{
		{"blk.1.ffn_up_exps.weight", tpCut{planes: &[2]uint64{3, 6}}, false},
		{"blk.1.ffn_down_exps.bias", tpCut{rows: [][2]uint64{{3, 6}}}, false},
		{"blk.1.ffn_gate_inp.weight", tpCut{}, false},
		{"output.weight", tpCut{}, true},
	} {
		cut, drop := tpCutFor(c.name, cfg, plan[1])
		if cut.String() != c.cut.String() || drop != c.drop {
			t.Errorf("%s: cut %s (drop %v), want %s (drop %v)", c.name, cut, drop, c.cut, c.drop)
		}
	}
}

// deepseek2 (DeepSeek V3's shape, K-quants): latent attention by heads in
// pairs (two heads' 128 values fill a 256-value block of attn_output), the
// dense block's MLP and the shared expert by columns, experts whole; the
// compressions, the router and the selection bias whole on every rank.
func TestPlanTPLatent(t *testing.T) {
	cfg := model.Config{Arch: "deepseek2", Layers: 4, Heads: 128, KVHeads: 1, HeadDim: 576, MLA: true, KVLoraRank: 512, RopeDim: 64,
		KeyDimMLA: 192, ValueDimMLA: 128, QLoraRank: 1536, FFDim: 18432, Experts: 256, ExpertsUsed: 8, ExpertFFDim: 2048,
		LeadDense: 1, SharedExperts: 1}
	f := &gguf.File{Tensors: []gguf.TensorInfo{{Name: "blk.0.attn_output.weight", Type: gguf.Q4_K}, {Name: "blk.0.ffn_down.weight", Type: gguf.Q6_K},
		{Name: "blk.1.attn_output.weight", Type: gguf.Q4_K}, {Name: "blk.1.ffn_down_exps.weight", Type: gguf.Q4_K}, {Name: "blk.1.ffn_down_shexp.weight", Type: gguf.Q6_K}}}
	plan, err := PlanTP(f, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got [][6]int
	for _, s := range plan {
		got = append(got, [6]int{s.Heads, s.KVHeads, s.FFDim, s.Experts, s.SharedFF, s.FullSharedFF})
		if s.KVHead != 0 || s.ExpertColumns || s.FullExperts != 256 {
			t.Errorf("rank %d: %+v", s.Rank, s)
		}
	}
	if want := "[[44 1 6144 86 768 2048] [42 1 6144 85 768 2048] [42 1 6144 85 512 2048]]"; fmt.Sprint(got) != want {
		t.Errorf("heads, kv heads, dense columns, experts, shared columns by rank: %v, want %s", got, want)
	}
	if s := plan[1].String(); !strings.Contains(s, "heads 44–85 of 128") || !strings.Contains(s, "dense MLP columns 6144–12287 of 18432") ||
		!strings.Contains(s, "experts 86–170 of 256") || !strings.Contains(s, "shared experts' columns 768–1535 of 2048") {
		t.Errorf("rank 1 reads %q", s)
	}
	for _, c := range []struct {
		name string
		cut  tpCut
	}{
		{"blk.1.attn_q_b.weight", tpCut{rows: [][2]uint64{{44 * 192, 86 * 192}}}},
		{"blk.1.attn_k_b.weight", tpCut{planes: &[2]uint64{44, 86}}},
		{"blk.1.attn_v_b.weight", tpCut{planes: &[2]uint64{44, 86}}},
		{"blk.1.attn_output.weight", tpCut{cols: [][2]uint64{{44 * 128, 86 * 128}}}},
		{"blk.1.attn_q_a.weight", tpCut{}},
		{"blk.1.attn_kv_a_mqa.weight", tpCut{}},
		{"blk.1.ffn_gate_inp.weight", tpCut{}},
		{"blk.1.exp_probs_b.bias", tpCut{}},
		{"blk.1.ffn_up_exps.weight", tpCut{planes: &[2]uint64{86, 171}}},
		{"blk.1.ffn_up_shexp.weight", tpCut{rows: [][2]uint64{{768, 1536}}}},
		{"blk.1.ffn_down_shexp.weight", tpCut{cols: [][2]uint64{{768, 1536}}}},
		{"blk.0.ffn_gate.weight", tpCut{rows: [][2]uint64{{6144, 12288}}}},
	} {
		if cut, drop := tpCutFor(c.name, cfg, plan[1]); cut.String() != c.cut.String() || drop {
			t.Errorf("%s: cut %s (drop %v), want %s", c.name, cut, drop, c.cut)
		}
	}
	if _, err := PlanTPExperts(f, cfg, 2, ExpertsColumns); !errors.Is(err, ErrTPSplit) || !strings.Contains(err.Error(), "split whole only") {
		t.Errorf("deepseek2's experts by columns: %v", err)
	}
}

func (cut tpCut) String() string {
	planes := "all"
	if cut.planes != nil {
		planes = fmt.Sprint(*cut.planes)
	}
	return fmt.Sprintf("rows %v cols %v planes %s zero %v", cut.rows, cut.cols, planes, cut.zero)
}
