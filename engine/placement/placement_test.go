package placement

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/split"
)

func layout(layers int) Layout {
	l := Layout{Layers: layers, Block: make([]uint64, layers), KV: make([]uint64, layers), Embed: 100 << 20, Head: 100 << 20, ContextLen: 2048}
	for i := range l.KV {
		l.KV[i] = 8 << 20
	}
	for i := range l.Block {
		l.Block[i] = 50 << 20
	}
	return l
}

// Layers follow available memory; ranges are contiguous and cover the
// model; embeddings count on the first rank, the head on the last.
func TestSplitProportional(t *testing.T) {
	l := layout(16)
	ranks, err := Split(l, []Node{{ID: "a", Available: 12 << 30}, {ID: "b", Available: 4 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if ranks[0].LastLayer != 12 || ranks[1].FirstLayer != 12 || ranks[1].LastLayer != 16 {
		t.Fatalf("ranks %+v, want 12 and 4 layers", ranks)
	}
	if want := uint64(Overhead + 12*(58<<20) + 100<<20); ranks[0].Need != want {
		t.Errorf("rank 0 needs %d, want %d", ranks[0].Need, want)
	}
	three, err := Split(l, []Node{{ID: "a", Available: 1 << 30}, {ID: "b", Available: 1 << 30}, {ID: "c", Available: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, r := range three {
		if r.FirstLayer != n || r.LastLayer-r.FirstLayer < 5 {
			t.Errorf("rank %d: %+v", i, r)
		}
		n = r.LastLayer
	}
	if n != 16 {
		t.Errorf("covers %d layers", n)
	}
	// A node with almost nothing still gets one layer.
	tiny, err := Split(layout(4), []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 1 << 30}})
	if err != nil || tiny[1].LastLayer-tiny[1].FirstLayer != 1 {
		t.Fatalf("%+v %v", tiny, err)
	}
}

// What does not fit is refused with each short rank's numbers; Best takes
// as few nodes as fit; previews list every count.
func TestFit(t *testing.T) {
	l := layout(16) // ~1.3 GiB in all
	_, err := Split(l, []Node{{ID: "a", Available: 512 << 20}})
	if !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), "rank 0 on a needs 1.") || !strings.Contains(err.Error(), "has 0.50 GiB available") {
		t.Fatalf("err = %v", err)
	}
	ranks, err := Best(l, []Node{{ID: "a", Available: 1 << 30}, {ID: "b", Available: 1 << 30}, {ID: "c", Available: 1 << 30}})
	if err != nil || len(ranks) != 2 {
		t.Fatalf("best %+v %v, want 2 ranks", ranks, err)
	}
	if _, err := Best(l, []Node{{ID: "a", Available: 100 << 20}, {ID: "b", Available: 100 << 20}}); !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), "tried 1 to 2 nodes") {
		t.Fatalf("err = %v", err)
	}
	ps := Previews(l, []Node{{ID: "a", Available: 1 << 30}, {ID: "b", Available: 1 << 30}, {ID: "c", Available: 1 << 30}})
	if len(ps) != 3 || ps[0].Fits || !ps[1].Fits || !ps[2].Fits || ps[0].Error == "" || len(ps[2].Ranks) != 3 {
		t.Fatalf("previews %+v", ps)
	}
}

func TestRanges(t *testing.T) {
	l := layout(4)
	nodes := []Node{{ID: "a", Available: 8 << 30}, {ID: "b", Available: 8 << 30}}
	if r, err := Ranges(l, nodes, [][2]int{{0, 1}, {1, 4}}); err != nil || r[1].FirstLayer != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range [][][2]int{{{0, 2}, {3, 4}}, {{0, 2}, {2, 3}}, {{1, 2}, {2, 4}}, {{0, 4}}, {{0, 2}, {2, 10}}, {{0, 1 << 62}, {1 << 62, 4}}} {
		if _, err := Ranges(l, nodes, bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if _, err := Split(l, make([]Node, 5)); err == nil {
		t.Error("5 nodes for 4 layers accepted")
	}
}

// A sliding-window layer's cache holds its window and a batch (a window
// per slot), a global layer's the whole context (one pool for every
// slot): Gemma 3's 5 of 6 layers need a fraction.
func TestLayoutSlidingWindowKV(t *testing.T) {
	cfg, f := familyFile(t, "gemma3", 6) // window 256 of 2048
	l, four := LayoutOf(f, cfg, 0, 1), LayoutOf(f, cfg, 0, 4)
	perToken := uint64(2 * cfg.KVHeads * cfg.HeadDim * 2)
	for i := range l.KV {
		want, want4 := 2048*perToken, 2048*perToken
		if i != 5 { // layers 0-4 slide over 256 positions (ollama keeps 255 past ones); 5 is global
			want = (255 + backend.DefaultBatchSize) * perToken
			want4 = (4*256 + backend.DefaultBatchSize) * perToken
		}
		if l.KV[i] != want || four.KV[i] != want4 {
			t.Errorf("layer %d: KV %d bytes with one slot, %d with four; want %d and %d", i, l.KV[i], four.KV[i], want, want4)
		}
	}
}

// deepseek2's cache holds one latent and its rotary key per token (and the
// latent again as values, in ollama's cache): 544 values where its 8 heads
// of 96-wide keys and 64-wide values would take 1280.
func TestLayoutLatentKV(t *testing.T) {
	_, l := familyLayout(t, "deepseek2", 3) // heads of 64: latent 256, rotary 32
	for i, kv := range l.KV {
		if want := uint64(2048 * (256 + 32 + 256) * 2); kv != want {
			t.Errorf("layer %d: KV %d bytes, want %d", i, kv, want)
		}
	}
}

// familyLayout is the layout of the small preset shaped as family, with
// layers blocks.
func familyLayout(t *testing.T, family string, layers int) (model.Config, Layout) {
	t.Helper()
	cfg, f := familyFile(t, family, layers)
	return cfg, LayoutOf(f, cfg, 0, 1)
}

// familyFile generates the small preset as family with layers blocks.
func familyFile(t *testing.T, family string, layers int) (model.Config, *gguf.File) {
	t.Helper()
	_, cfg, f := familyModel(t, family, layers)
	return cfg, f
}

// familyModel is familyFile with the file's path.
func familyModel(t *testing.T, family string, layers int) (string, model.Config, *gguf.File) {
	t.Helper()
	o := modeltest.Family(t, model.Presets["small"], family)
	o.Layers = layers
	path := modeltest.Generate(t, family+".gguf", o)
	f, cfg := modeltest.Read(t, path)
	return path, cfg, f
}

// What placement reserves for a tensor-parallel rank's weights is what
// the rank's slice file holds, within 6 % and never less: dense, a
// mixture split by expert columns and whole, and deepseek2 (its latent
// attention by heads, the compressions whole, its dense block and shared
// expert by columns, experts whole), and glm4moe (heads and deepseek2's
// MLP; its MTP block in no slice and reserved by no rank). deepseek2's KV
// cache is the whole latent on every rank.
func TestTensorNeedMatchesSlices(t *testing.T) {
	for _, fam := range []string{"llama", "qwen3moe", "deepseek2", "glm4moe"} {
		path, cfg, f := familyModel(t, fam, 3)
		l := LayoutOf(f, cfg, 0, 1)
		var kv uint64
		for _, b := range l.KV {
			kv += b
		}
		for _, tp := range []int{2, 3} {
			plan, err := split.PlanTP(f, cfg, tp)
			if err != nil {
				t.Fatal(err)
			}
			nodes := make([]Node, tp)
			for i := range nodes {
				nodes[i] = Node{ID: string(rune('a' + i)), Available: 64 << 30}
			}
			ranks, err := Tensor(l, plan, nodes)
			if err != nil {
				t.Fatal(err)
			}
			for r, s := range plan {
				p := filepath.Join(t.TempDir(), "slice.gguf")
				if err := split.WriteTPSlice(path, p, 0, cfg.Layers, s, "test"); err != nil {
					t.Fatal(err)
				}
				sf, err := gguf.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				var held uint64
				for _, ti := range sf.Tensors {
					held += ti.Size
				}
				cache := kv * uint64(s.KVHeads) / uint64(s.FullKVHeads)
				if cfg.MLA && cache != kv {
					t.Errorf("%s tensor %d rank %d: KV %d of the latent's %d", fam, tp, r, cache, kv)
				}
				got := ranks[r].Need - Overhead - cache
				if got < held || float64(got) > 1.06*float64(held) {
					t.Errorf("%s tensor %d rank %d (%s): placement reserves %d bytes of weights, the slice holds %d", fam, tp, r, s, got, held)
				}
			}
		}
	}
}
