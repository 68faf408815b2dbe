package pull

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// A registry pull: manifest, every blob (through the CDN redirect, by
// digest), then the manifest on disk, in Ollama's layout.
func TestPullFromRegistry(t *testing.T) {
	testutil.CheckLeaks(t)
	h := pulltest.NewHub(t)
	weights := content(700_000, 20)
	raw := h.AddOllama("library", "tiny", "q8", map[string][]byte{
		"application/vnd.ollama.image.model":    weights,
		"application/vnd.ollama.image.template": []byte("{{ .Prompt }}"),
		"application/vnd.ollama.image.params":   []byte(`{"stop":["<|im_end|>"]}`),
	})
	store := state.NewStore(state.NewLog(256), state.NewMemoryHistory(time.Minute))
	seq := &state.LocalSequencer{Store: store}
	dir := t.TempDir()
	pulled := make(chan struct{}, 1)
	p := New(Config{Self: "a", OllamaDir: dir, Registry: Registry{URL: h.URL()}, Publish: seq.Publish,
		Fetcher: &Fetcher{Chunk: 64 << 10}, Pulled: func() { pulled <- struct{}{} }})
	t.Cleanup(p.Close)
	d, err := p.Pull("tiny:q8")
	if err != nil {
		t.Fatal(err)
	}
	<-pulled
	got := store.State().Downloads[d.ID]
	host := Registry{URL: h.URL()}.Host()
	if got.Status != state.DownloadDone || got.Model != host+"/library/tiny:q8" || len(got.Files) != 4 {
		t.Fatalf("download %+v", got)
	}
	m, err := os.ReadFile(filepath.Join(dir, "manifests", host, "library", "tiny", "q8"))
	if err != nil || !bytes.Equal(m, raw) {
		t.Fatalf("manifest on disk: %v", err)
	}
	man, _, _ := Registry{URL: h.URL()}.Manifest(context.Background(), OllamaRef{"library", "tiny", "q8"})
	for _, l := range man.Layers {
		if l.MediaType == mediaModel {
			if b, err := os.ReadFile(OllamaStore{Dir: dir}.Blob(l.Digest)); err != nil || !bytes.Equal(b, weights) {
				t.Errorf("model blob: %v", err)
			}
		}
	}
}

// Manifests that would write outside the store, or ask for absurd
// sizes, are refused; so are bad names.
func TestRegistryRefusesBadManifests(t *testing.T) {
	h := pulltest.NewHub(t)
	g := Registry{URL: h.URL()}
	digest := "sha256:" + strings.Repeat("a", 64)
	for name, raw := range map[string]string{
		"path digest":   `{"schemaVersion":2,"config":{"digest":"` + digest + `"},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:../../../etc/passwd","size":1}]}`,
		"huge":          `{"schemaVersion":2,"config":{"digest":"` + digest + `"},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"` + digest + `","size":20000000000000}]}`,
		"no model":      `{"schemaVersion":2,"config":{"digest":"` + digest + `"},"layers":[{"mediaType":"application/vnd.ollama.image.template","digest":"` + digest + `","size":1}]}`,
		"not json":      `{"schemaVersion":`,
		"config digest": `{"schemaVersion":2,"config":{"digest":"md5:x"},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"` + digest + `","size":1}]}`,
	} {
		h.SetManifest("library", "bad", "x", []byte(raw))
		if _, _, err := g.Manifest(context.Background(), OllamaRef{"library", "bad", "x"}); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if _, _, err := g.Manifest(context.Background(), OllamaRef{"library", "none", "x"}); err == nil || !strings.Contains(err.Error(), "no such model") {
		t.Errorf("missing model: %v", err)
	}
	for _, ref := range []string{"../x", "a/b/c", "Upper", "x:..", "x:a/b", ""} {
		if _, err := ParseOllamaRef(ref); err == nil {
			t.Errorf("%q accepted", ref)
		}
	}
	if r, err := ParseOllamaRef("qwen3"); err != nil || r.String() != "library/qwen3:latest" {
		t.Errorf("qwen3: %v %v", r, err)
	}
	if err := (OllamaStore{Dir: t.TempDir()}).WriteManifest("../x", OllamaRef{"library", "a", "b"}, nil); err == nil {
		t.Error("a host with .. was written")
	}
}
