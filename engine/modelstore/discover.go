package modelstore

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// Model sources, in the order they win when two give the same id.
const (
	SourceOrrery      = "orrery"
	SourceOllama      = "ollama"
	SourceLMStudio    = "lmstudio"
	SourceHuggingFace = "huggingface"
)

// Discovery limits: a model store is walked at most this deep and this
// many files are looked at, so that a huge or looping tree cannot stall a
// scan.
const (
	maxWalkDepth = 8
	maxWalkFiles = 20000
	maxModels    = 1000
)

// Entry is one model found on this machine.
type Entry struct {
	// ID is what a request names the model by: the file name without
	// .gguf (orrery), name:tag (ollama), publisher/repo/file (LM Studio),
	// org/repo/file (Hugging Face).
	ID           string    `json:"id"`
	Source       string    `json:"source"`
	Path         string    `json:"path"`
	SizeBytes    int64     `json:"sizeBytes"`
	ModTime      time.Time `json:"modTime"`
	Arch         string    `json:"arch,omitempty"`
	Layers       int       `json:"layers,omitempty"`
	Quantization string    `json:"quantization,omitempty"`
	// Types is the tensor type mix, most bytes first.
	Types      []model.TypeShare `json:"types,omitempty"`
	Params     uint64            `json:"params,omitempty"`
	ContextLen int               `json:"contextLength,omitempty"`
	// Pooling is set for an embedding model (its <arch>.pooling_type).
	Pooling model.Pooling `json:"pooling,omitempty"`
	// Error says why the model cannot run here (unreadable, or an
	// unsupported architecture); such entries are listed, not served.
	Error string `json:"error,omitempty"`

	// Defaults are the generation settings of an Ollama model's params
	// layer (nil: none).
	Defaults *Defaults `json:"defaults,omitempty"`

	manifest string // an Ollama model's manifest file
}

// Dirs are the places models are looked for; an empty field is skipped.
type Dirs struct {
	// Orrery is <data-dir>/models, the agent's own (read-write).
	Orrery string
	// Ollama is Ollama's store: manifests/ and blobs/ (read-only).
	Ollama string
	// LMStudio is LM Studio's models folder (read-only).
	LMStudio string
	// HuggingFace is the Hugging Face hub cache (read-only).
	HuggingFace string
}

// DefaultDirs are the usual places, honouring OLLAMA_MODELS, HF_HUB_CACHE
// and HF_HOME as those tools do.
func DefaultDirs(dataDir, home string, getenv func(string) string) Dirs {
	d := Dirs{Orrery: filepath.Join(dataDir, "models")}
	if home == "" {
		return d
	}
	d.Ollama = filepath.Join(home, ".ollama", "models")
	if v := getenv("OLLAMA_MODELS"); v != "" {
		d.Ollama = v
	}
	d.LMStudio = filepath.Join(home, ".lmstudio", "models")
	d.HuggingFace = filepath.Join(home, ".cache", "huggingface", "hub")
	if v := getenv("HF_HOME"); v != "" {
		d.HuggingFace = filepath.Join(v, "hub")
	}
	if v := getenv("HF_HUB_CACHE"); v != "" {
		d.HuggingFace = v
	}
	return d
}

// Scanner finds models, remembering what it read of each file (by path,
// size and modification time) so that periodic scans reread nothing.
type Scanner struct {
	Dirs Dirs

	mu    sync.Mutex // guards cache
	cache map[string]Entry
}

// candidate is a model file a scan found; manifest and params are an
// Ollama model's manifest and params layer ("" elsewhere).
type candidate struct{ id, source, path, manifest, params string }

// Scan lists the models in every directory, sorted by id. A directory
// that does not exist is not an error.
func (s *Scanner) Scan() []Entry {
	var cands []candidate
	cands = append(cands, scanOrrery(s.Dirs.Orrery)...)
	cands = append(cands, scanOllama(s.Dirs.Ollama)...)
	cands = append(cands, scanLMStudio(s.Dirs.LMStudio)...)
	cands = append(cands, scanHF(s.Dirs.HuggingFace)...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil {
		s.cache = map[string]Entry{}
	}
	seen := map[string]bool{}
	next := map[string]Entry{}
	var out []Entry
	for _, c := range cands {
		if seen[c.id] || len(out) >= maxModels {
			continue
		}
		seen[c.id] = true
		st, err := os.Stat(c.path) // follows the HF cache's symlinks
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		key := fmt.Sprintf("%s\x00%d\x00%d", c.path, st.Size(), st.ModTime().UnixNano())
		e, ok := s.cache[key]
		if !ok {
			e = describe(c.path)
			e.SizeBytes, e.ModTime = st.Size(), st.ModTime().UTC()
		}
		e.ID, e.Source, e.Path, e.manifest = c.id, c.source, c.path, c.manifest
		e.Defaults = nil
		if c.params != "" {
			// Per manifest, not per file: two tags may share a blob.
			e.Defaults = readDefaults(c.params)
		}
		next[key] = e
		out = append(out, e)
	}
	s.cache = next
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Find returns the model with this id.
func (s *Scanner) Find(id string) (Entry, bool) {
	for _, e := range s.Scan() {
		if e.ID == id {
			return e, true
		}
	}
	return Entry{}, false
}

// describe reads a GGUF's header into an entry.
func describe(path string) Entry {
	var e Entry
	f, err := gguf.ReadFile(path)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Arch = f.String("general.architecture", "")
	cfg, err := model.FromGGUF(f)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	// A vocabulary or chat template Orrery cannot use makes the model
	// unservable too: say so here, not first when a runner loads it.
	if _, err := tokenizer.New(f); err != nil {
		e.Error = err.Error()
		return e
	}
	e.Layers, e.Quantization, e.Types, e.Params, e.ContextLen = cfg.Layers, cfg.FileType, cfg.Types, cfg.Params, cfg.ContextLen
	e.Pooling = cfg.Pooling
	return e
}

// walk visits regular files and symlinks under root, to a bounded depth
// and count.
func walk(root string, visit func(path string, d fs.DirEntry)) {
	if root == "" {
		return
	}
	n := 0
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if n++; n > maxWalkFiles {
			return fs.SkipAll
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.Count(rel, string(filepath.Separator)) >= maxWalkDepth {
				return fs.SkipDir
			}
			return nil
		}
		visit(path, d)
		return nil
	})
}

func isGGUF(name string) bool { return strings.EqualFold(filepath.Ext(name), ".gguf") }

// splitPart matches the second and later files of a split GGUF, which are
// not models of their own.
var splitPart = regexp.MustCompile(`-(\d{5})-of-\d{5}\.gguf$`)

func laterPart(name string) bool {
	m := splitPart.FindStringSubmatch(name)
	return m != nil && m[1] != "00001"
}

func scanOrrery(dir string) []candidate {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []candidate
	for _, e := range ents {
		if !e.IsDir() && isGGUF(e.Name()) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, candidate{strings.TrimSuffix(e.Name(), filepath.Ext(e.Name())), SourceOrrery, filepath.Join(dir, e.Name()), "", ""})
		}
	}
	return out
}

// scanOllama reads manifests/<host>/<namespace>/<model>/<tag>; the model
// layer's digest names the blob.
func scanOllama(dir string) []candidate {
	if dir == "" {
		return nil
	}
	root := filepath.Join(dir, "manifests")
	var out []candidate
	walk(root, func(path string, d fs.DirEntry) {
		rel, _ := filepath.Rel(root, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 4 {
			return
		}
		m, err := readOllamaManifest(path)
		if err != nil {
			return
		}
		blob, err := m.modelBlob()
		if err != nil {
			return
		}
		params := ""
		if p, ok := m.paramsBlob(); ok {
			params = filepath.Join(dir, "blobs", p)
		}
		id := parts[2] + ":" + parts[3]
		if !(parts[0] == "registry.ollama.ai" && parts[1] == "library") {
			id = strings.Join(parts[:3], "/") + ":" + parts[3]
		}
		out = append(out, candidate{id, SourceOllama, filepath.Join(dir, "blobs", blob), path, params})
	})
	return out
}

func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, limit %d", path, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

// scanLMStudio lists <publisher>/<repo>/<file>.gguf.
func scanLMStudio(dir string) []candidate {
	var out []candidate
	walk(dir, func(path string, d fs.DirEntry) {
		if !isGGUF(path) || laterPart(path) || strings.Contains(strings.ToLower(filepath.Base(path)), "mmproj") {
			return
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, candidate{strings.TrimSuffix(filepath.ToSlash(rel), filepath.Ext(rel)), SourceLMStudio, path, "", ""})
	})
	return out
}

// scanHF lists models--<org>--<repo>/snapshots/<rev>/<file>.gguf; when
// several revisions hold a file, the first in name order is kept.
func scanHF(dir string) []candidate {
	var out []candidate
	walk(dir, func(path string, d fs.DirEntry) {
		if !isGGUF(path) || laterPart(path) {
			return
		}
		rel, _ := filepath.Rel(dir, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) < 4 || !strings.HasPrefix(parts[0], "models--") || parts[1] != "snapshots" {
			return
		}
		repo := strings.ReplaceAll(strings.TrimPrefix(parts[0], "models--"), "--", "/")
		file := strings.Join(parts[3:], "/")
		out = append(out, candidate{repo + "/" + strings.TrimSuffix(file, filepath.Ext(file)), SourceHuggingFace, path, "", ""})
	})
	return out
}
