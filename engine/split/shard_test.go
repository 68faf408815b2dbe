package split

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

// A middle shard of every family gen-model writes holds rope_freqs too
// (every block's RoPE reads it) and reads back with the model's fields.
func TestMiddleShardOfEveryFamily(t *testing.T) {
	for _, fam := range model.Families {
		t.Run(fam, func(t *testing.T) {
			o, err := model.ApplyFamily(model.Presets["tiny"], fam)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := model.Generate(path, o); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := model.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			shard := path + ".shard"
			if err := WriteShard(path, shard, 1, 3, ""); err != nil {
				t.Fatal(err)
			}
			sf, err := gguf.ReadFile(shard)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := model.FromGGUF(sf)
			if err != nil {
				t.Fatal(err)
			}
			_, hasFreqs := sf.Tensor("rope_freqs.weight")
			if hasFreqs != (fam == "llama3") || sc.RopeFreqs != c.RopeFreqs || sc.Experts != c.Experts || sc.HeadDim != c.HeadDim || sc.KQScale != c.KQScale {
				t.Errorf("shard: rope_freqs %v, config %+v", hasFreqs, sc)
			}
			if first, last := sc.Blocks(); first != 1 || last != 3 {
				t.Errorf("shard holds blocks [%d, %d), want [1, 3)", first, last)
			}
		})
	}
}

// glm4moe's multi-token-prediction block (blk.4 after a trunk of 4) goes
// into no shard and no tensor-parallel slice, even the last's, whose
// metadata still states it: each reads back as the same trunk.
func TestGLM4MoEMTPBlockInNoShard(t *testing.T) {
	o, err := model.ApplyFamily(model.Presets["tiny"], "glm4moe")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := model.Generate(path, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Tensor("blk.4.nextn.eh_proj.weight"); !ok || c.Layers != 4 || c.NextN != 1 {
		t.Fatalf("generated: %d layers, %d MTP, eh_proj %v", c.Layers, c.NextN, ok)
	}
	plan, err := PlanTP(f, c, 2)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for i, s := range plan {
		p := filepath.Join(t.TempDir(), "tp.gguf")
		if err := WriteTPSlice(path, p, 2, 4, s, ""); err != nil {
			t.Fatalf("slice %d: %v", i, err)
		}
		parts = append(parts, p)
	}
	p := filepath.Join(t.TempDir(), "shard.gguf")
	if err := WriteShard(path, p, 2, 4, ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(parts, p) {
		sf, err := gguf.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := model.FromGGUF(sf)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Layers != 4 || sc.NextN != 1 || sc.FileBlocks() != 5 {
			t.Errorf("%s: %d layers, %d MTP", filepath.Base(p), sc.Layers, sc.NextN)
		}
		for _, ti := range sf.Tensors {
			if strings.HasPrefix(ti.Name, "blk.4.") {
				t.Errorf("%s holds %s", filepath.Base(p), ti.Name)
			}
		}
	}
}
