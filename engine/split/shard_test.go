package split

import (
	"path/filepath"
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
