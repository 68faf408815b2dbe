package conformance

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// The families issue 49 adds give llama.cpp's greedy output, token for
// token over 16 tokens, on a tiny F32 model (gen-model's tiny preset:
// 4 blocks of dim 64, vocab 512) under matched kernels, where the two
// engines compute the same logits: a prompt of 8 ids, then 16 tokens
// each fed back. A wrong op in the graph parts them within a few tokens.
func TestTinyGreedyMatchesLlamaCpp(t *testing.T) {
	dir := llamaref.Require(t, "bin/orrery-llama-logits")
	const gen = 16
	matched := settings[1]
	ids := []int32{1, 300, 301, 302, 17, 250, 99, 7}
	for _, fam := range []string{"glm4moe"} {
		t.Run(fam, func(t *testing.T) {
			o, err := model.ApplyFamily(model.Presets["tiny"], fam)
			if err != nil {
				t.Fatal(err)
			}
			o.Type, o.Seed = "F32", 3
			path := filepath.Join(t.TempDir(), fam+".gguf")
			if err := model.Generate(path, o); err != nil {
				t.Fatal(err)
			}
			want := runLlama(t, dir, path, ids, matched, gen, o.Vocab)
			r, err := ggml.Load(context.Background(), path, optionsOf(matched), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := generate([]*ggml.Rank{r}, ids, o.Vocab, gen)
			if err != nil {
				t.Fatal(err)
			}
			if len(want.gen) != gen || !slices.Equal(got.gen, want.gen) {
				t.Errorf("greedy tokens %v, llama.cpp's %v", got.gen, want.gen)
			}
			t.Logf("%s: %d greedy tokens as llama.cpp's: %v", fam, len(got.gen), got.gen)
		})
	}
}
