package modelstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every store layout is found, named as its tool names it; unsupported
// and broken files are listed with the reason; a digest that is not a
// sha256 never becomes a path.
func TestScan(t *testing.T) {
	root := t.TempDir()
	tiny := filepath.Join(root, "src.gguf")
	if err := model.Generate(tiny, model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	model, _ := os.ReadFile(tiny)
	other := filepath.Join(root, "mamba.gguf")
	if err := gguf.WriteFile(other, []gguf.KV{{Key: "general.architecture", Value: "mamba"}}, nil); err != nil {
		t.Fatal(err)
	}
	mamba, _ := os.ReadFile(other)

	d := Dirs{Orrery: filepath.Join(root, "data", "models"), Ollama: filepath.Join(root, "ollama"),
		LMStudio: filepath.Join(root, "lms"), HuggingFace: filepath.Join(root, "hf")}
	write(t, filepath.Join(d.Orrery, "demo.gguf"), model)
	write(t, filepath.Join(d.Orrery, "broken.gguf"), []byte("GGUF not really"))
	write(t, filepath.Join(d.Orrery, "notes.txt"), []byte("x"))
	digest := strings.Repeat("ab", 32)
	write(t, filepath.Join(d.Ollama, "blobs", "sha256-"+digest), model)
	write(t, filepath.Join(d.Ollama, "manifests", "registry.ollama.ai", "library", "tiny", "latest"),
		[]byte(`{"layers":[{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:00"},{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:`+digest+`"}]}`))
	write(t, filepath.Join(d.Ollama, "manifests", "hub.example", "me", "tiny", "v2"),
		[]byte(`{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:`+digest+`"}]}`))
	write(t, filepath.Join(d.Ollama, "manifests", "registry.ollama.ai", "library", "evil", "latest"),
		[]byte(`{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:../../../etc/passwd"}]}`))
	write(t, filepath.Join(d.LMStudio, "pub", "Repo-GGUF", "repo-q8_0.gguf"), model)
	write(t, filepath.Join(d.LMStudio, "pub", "Repo-GGUF", "mmproj-f16.gguf"), model)
	write(t, filepath.Join(d.LMStudio, "pub", "Big", "big-00002-of-00002.gguf"), model)
	write(t, filepath.Join(d.HuggingFace, "models--org--name", "blobs", "deadbeef"), mamba)
	snap := filepath.Join(d.HuggingFace, "models--org--name", "snapshots", "rev1")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../blobs/deadbeef", filepath.Join(snap, "m.gguf")); err != nil {
		t.Fatal(err)
	}

	s := &Scanner{Dirs: d}
	got := map[string]Entry{}
	for _, e := range s.Scan() {
		got[e.ID] = e
	}
	want := map[string]string{"demo": SourceOrrery, "broken": SourceOrrery, "tiny:latest": SourceOllama,
		"hub.example/me/tiny:v2": SourceOllama, "pub/Repo-GGUF/repo-q8_0": SourceLMStudio, "org/name/m": SourceHuggingFace}
	for id, src := range want {
		e, ok := got[id]
		if !ok || e.Source != src {
			t.Errorf("%s: %+v, want source %s", id, e, src)
		}
	}
	if len(got) != len(want) {
		t.Errorf("found %d models, want %d: %v", len(got), len(want), got)
	}
	if e := got["tiny:latest"]; e.Error != "" || e.Arch != "llama" || e.Layers != 4 || e.Quantization != "F32" || e.SizeBytes != int64(len(model)) {
		t.Errorf("tiny:latest: %+v", e)
	}
	if e := got["org/name/m"]; !strings.Contains(e.Error, "supported: llama, qwen2") {
		t.Errorf("mamba: error %q", e.Error)
	}
	if e := got["broken"]; e.Error == "" {
		t.Error("a broken file has no error")
	}
	// A second scan reads nothing again but gives the same answer.
	if again := s.Scan(); len(again) != len(got) {
		t.Errorf("rescan: %d models", len(again))
	}
	if _, ok := s.Find("demo"); !ok {
		t.Error("Find(demo) failed")
	}
}

func TestDefaultDirs(t *testing.T) {
	env := map[string]string{"OLLAMA_MODELS": "/o", "HF_HOME": "/hfhome"}
	d := DefaultDirs("/data", "/home/u", func(k string) string { return env[k] })
	if d.Orrery != "/data/models" || d.Ollama != "/o" || d.LMStudio != "/home/u/.lmstudio/models" || d.HuggingFace != "/hfhome/hub" {
		t.Fatalf("%+v", d)
	}
}
