package split

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
)

// A middle shard of every family gen-model writes holds rope_freqs too
// (every block's RoPE reads it) and reads back with the model's fields.
func TestMiddleShardOfEveryFamily(t *testing.T) {
	for _, fam := range model.Families {
		t.Run(fam, func(t *testing.T) {
			path := modeltest.Generate(t, "m.gguf", modeltest.Family(t, model.Presets["tiny"], fam))
			_, c := modeltest.Read(t, path)
			shard := path + ".shard"
			if err := WriteShard(path, shard, 1, 3, ""); err != nil {
				t.Fatal(err)
			}
			sf, sc := modeltest.Read(t, shard)
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
	path := modeltest.Generate(t, "m.gguf", modeltest.Family(t, model.Presets["tiny"], "glm4moe"))
	f, c := modeltest.Read(t, path)
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
		sf, sc := modeltest.Read(t, p)
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
