package modelstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func writeN(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func ids(s *Scanner) []string {
	var out []string
	for _, e := range s.Scan() {
		out = append(out, e.ID)
	}
	return out
}

// Every part of a split GGUF goes; the other model stays.
func TestRemoveOrrery(t *testing.T) {
	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		writeN(t, filepath.Join(dir, "big-0000"+string(rune('0'+i))+"-of-00003.gguf"), 100)
	}
	writeN(t, filepath.Join(dir, "other.gguf"), 50)
	s := &Scanner{Dirs: Dirs{Orrery: dir}}
	r, err := s.Remove("big-00001-of-00003")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Files) != 3 || r.Freed != 300 {
		t.Fatalf("removed %v, freed %d", r.Files, r.Freed)
	}
	if got := ids(s); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("left %v", got)
	}
	if _, err := s.Remove("big-00001-of-00003"); !errors.Is(err, ErrNoModel) {
		t.Fatalf("second remove: %v", err)
	}
}

// The file's links in every snapshot go, and its blob; a blob another
// file links to stays.
func TestRemoveHF(t *testing.T) {
	cache := t.TempDir()
	repo := filepath.Join(cache, "models--org--M-GGUF")
	writeN(t, filepath.Join(repo, "blobs", "aaaa"), 1000)
	writeN(t, filepath.Join(repo, "blobs", "bbbb"), 700)
	for _, l := range [][2]string{{"rev1", "m-Q4.gguf"}, {"rev2", "m-Q4.gguf"}, {"rev2", "m-Q8.gguf"}} {
		link := filepath.Join(repo, "snapshots", l[0], l[1])
		os.MkdirAll(filepath.Dir(link), 0o755)
		blob := "aaaa"
		if l[1] == "m-Q8.gguf" {
			blob = "bbbb"
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), link); err != nil {
			t.Fatal(err)
		}
	}
	s := &Scanner{Dirs: Dirs{HuggingFace: cache}}
	r, err := s.Remove("org/M-GGUF/m-Q4")
	if err != nil {
		t.Fatal(err)
	}
	if r.Freed != 1000 || len(r.Files) != 3 || exists(filepath.Join(repo, "blobs", "aaaa")) || !exists(filepath.Join(repo, "blobs", "bbbb")) {
		t.Fatalf("removed %v, freed %d", r.Files, r.Freed)
	}
	if got := ids(s); !slices.Equal(got, []string{"org/M-GGUF/m-Q8"}) {
		t.Fatalf("left %v", got)
	}
}

// The manifest goes, and its blobs but the one another manifest shares.
func TestRemoveOllama(t *testing.T) {
	store := t.TempDir()
	hex := func(c byte) string {
		b := make([]byte, 64)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	shared, m1, m2 := hex('a'), hex('b'), hex('c')
	for _, h := range []string{shared, m1, m2} {
		writeN(t, filepath.Join(store, "blobs", "sha256-"+h), 10)
	}
	manifest := func(name, model string) {
		p := filepath.Join(store, "manifests", "registry.ollama.ai", "library", name, "latest")
		os.MkdirAll(filepath.Dir(p), 0o755)
		body := `{"config":{"digest":"sha256:` + shared + `"},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:` + model + `"}]}`
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest("one", m1)
	manifest("two", m2)
	s := &Scanner{Dirs: Dirs{Ollama: store}}
	r, err := s.Remove("one:latest")
	if err != nil {
		t.Fatal(err)
	}
	if r.Freed != 10 || exists(filepath.Join(store, "blobs", "sha256-"+m1)) || !exists(filepath.Join(store, "blobs", "sha256-"+shared)) {
		t.Fatalf("removed %v, freed %d", r.Files, r.Freed)
	}
	if got := ids(s); !slices.Equal(got, []string{"two:latest"}) {
		t.Fatalf("left %v", got)
	}
}

// An Ollama model's params layer becomes its defaults; a model without
// one, or with one that does not parse, has none.
func TestOllamaDefaults(t *testing.T) {
	store := t.TempDir()
	blob := func(b []byte) string {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		writeBytes(t, filepath.Join(store, "blobs", "sha256-"+h), b)
		return "sha256:" + h
	}
	weights := blob([]byte("not a real gguf"))
	good := blob([]byte(`{"temperature":0.6,"top_k":20,"stop":["<|im_end|>"],"num_ctx":4096}`))
	bad := blob([]byte(`{"stop":"not a list"}`))
	manifest := func(name string, params string) {
		layers := `{"mediaType":"application/vnd.ollama.image.model","digest":"` + weights + `"}`
		if params != "" {
			layers += `,{"mediaType":"application/vnd.ollama.image.params","digest":"` + params + `"}`
		}
		writeBytes(t, filepath.Join(store, "manifests", "registry.ollama.ai", "library", name, "latest"),
			[]byte(`{"config":{"digest":"`+weights+`"},"layers":[`+layers+`]}`))
	}
	manifest("with", good)
	manifest("without", "")
	manifest("broken", bad)
	got := map[string]*Defaults{}
	for _, e := range (&Scanner{Dirs: Dirs{Ollama: store}}).Scan() {
		got[e.ID] = e.Defaults
	}
	d := got["with:latest"]
	if d == nil || *d.Temperature != 0.6 || *d.TopK != 20 || !slices.Equal(d.Stop, []string{"<|im_end|>"}) || d.TopP != nil {
		t.Fatalf("with params: %+v", d)
	}
	if got["without:latest"] != nil || got["broken:latest"] != nil || len(got) != 3 {
		t.Fatalf("defaults %+v", got)
	}
}

func writeBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
