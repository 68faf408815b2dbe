package split

import (
	"path/filepath"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

// FuzzTPKeys feeds model.FromGGUF a tensor-parallel slice's metadata
// with fuzzed orrery.tp keys: it must not panic, and a slice it accepts
// lies within the model and keeps whole GQA groups.
func FuzzTPKeys(f *testing.F) {
	dir := f.TempDir()
	o := model.Presets["tiny"]
	o.Heads, o.KVHeads = 8, 4
	path := filepath.Join(dir, "m.gguf")
	if err := model.Generate(path, o); err != nil {
		f.Fatal(err)
	}
	src, err := gguf.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := model.FromGGUF(src)
	if err != nil {
		f.Fatal(err)
	}
	plan, err := PlanTP(src, cfg, 2)
	if err != nil {
		f.Fatal(err)
	}
	slice := filepath.Join(dir, "tp1.gguf")
	if err := WriteTPSlice(path, slice, 0, cfg.Layers, plan[1], "fuzz"); err != nil {
		f.Fatal(err)
	}
	sf, err := gguf.ReadFile(slice)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint32(1), uint32(2), uint32(4), uint32(4), uint32(2), uint32(2), uint32(96), uint32(96))
	f.Add(uint32(0), uint32(1), uint32(0), uint32(9), uint32(0), uint32(0), uint32(0), uint32(500))
	f.Fuzz(func(t *testing.T, rank, ranks, head, heads, kv, kvHeads, ff, ffDim uint32) {
		g := &gguf.File{KV: append([]gguf.KV(nil), sf.KV...), Tensors: sf.Tensors}
		for _, kv := range []gguf.KV{{Key: model.KeyTPRank, Value: rank}, {Key: model.KeyTPRanks, Value: ranks}, {Key: model.KeyTPHead, Value: head},
			{Key: model.KeyTPHeads, Value: heads}, {Key: model.KeyTPKVHead, Value: kv}, {Key: model.KeyTPKVHeads, Value: kvHeads},
			{Key: model.KeyTPFF, Value: ff}, {Key: model.KeyTPFFDim, Value: ffDim}} {
			g = g.With(kv.Key, kv.Value)
		}
		c, err := model.FromGGUF(g)
		if err != nil {
			return
		}
		s := c.TP
		if s == nil || s.Rank >= s.Ranks || s.Head+s.Heads > s.FullHeads || s.KVHead+s.KVHeads > s.FullKVHeads ||
			s.FF+s.FFDim > s.FullFF || c.Heads%c.KVHeads != 0 || c.Heads != s.Heads || c.FFDim != s.FFDim {
			t.Fatalf("accepted an impossible slice: %+v of %+v", s, c)
		}
	})
}

// setKV replaces (or adds) a metadata key, in a new File (a File indexes
// its keys when first asked).
