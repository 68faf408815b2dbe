package modelstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrNoModel is Remove's error for an id no store lists.
var ErrNoModel = errors.New("no such model")

// Removed says what Remove deleted.
type Removed struct {
	Entry Entry
	// Files are the paths removed (links, manifests and data files);
	// Freed the bytes of data files removed.
	Files []string
	Freed int64
}

// Remove deletes the model with this id from the store the scanner
// lists it in, as that store's own tools would: the GGUF (every part of
// a split one) from Orrery's and LM Studio's folders; from the Hugging
// Face cache its links in every snapshot of the repo and the blobs no
// other link points to; from Ollama's store the manifest and the blobs
// no other manifest names. Only paths the scan found, or that lie in
// the same store, are touched.
func (s *Scanner) Remove(id string) (Removed, error) {
	e, ok := s.Find(id)
	if !ok {
		return Removed{}, fmt.Errorf("%w %q on this node", ErrNoModel, id)
	}
	r := Removed{Entry: e}
	var err error
	switch e.Source {
	case SourceOrrery, SourceLMStudio:
		for _, p := range parts(e.Path) {
			err = errors.Join(err, r.remove(p, true))
		}
	case SourceHuggingFace:
		err = r.removeHF(s.Dirs.HuggingFace, e.Path)
	case SourceOllama:
		err = r.removeOllama(s.Dirs.Ollama, e.manifest)
	default:
		err = fmt.Errorf("model %s: unknown store %q", id, e.Source)
	}
	if err != nil {
		return r, fmt.Errorf("remove %s: %w", id, err)
	}
	return r, nil
}

// remove deletes one file, counting its bytes when it holds data.
func (r *Removed) remove(path string, data bool) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	r.Files = append(r.Files, path)
	if data && st.Mode().IsRegular() {
		r.Freed += st.Size()
	}
	return nil
}

var firstPart = regexp.MustCompile(`-00001-of-(\d{5})\.gguf$`)

// parts is a GGUF's path, or every part of a split one, from its first.
func parts(path string) []string {
	m := firstPart.FindStringSubmatch(path)
	if m == nil {
		return []string{path}
	}
	var n int
	fmt.Sscanf(m[1], "%d", &n)
	out := []string{path}
	for i := 2; i <= n; i++ {
		p := strings.TrimSuffix(path, m[0]) + fmt.Sprintf("-%05d-of-%s.gguf", i, m[1])
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// removeHF removes a snapshot file's links in every snapshot of its repo,
// then the blobs left without a link.
func (r *Removed) removeHF(cache, path string) error {
	rel, err := filepath.Rel(cache, path)
	segs := strings.Split(filepath.ToSlash(rel), "/")
	if err != nil || len(segs) < 4 || !strings.HasPrefix(segs[0], "models--") || segs[1] != "snapshots" {
		return fmt.Errorf("%s is not a file of a snapshot in %s", path, cache)
	}
	repo := filepath.Join(cache, segs[0])
	blobs, err := filepath.EvalSymlinks(filepath.Join(repo, "blobs")) // links resolve to real paths
	if err != nil {
		blobs = filepath.Join(repo, "blobs")
	}
	targets := map[string]bool{}
	snaps, _ := os.ReadDir(filepath.Join(repo, "snapshots"))
	for _, p := range parts(filepath.Join(segs[3:]...)) {
		for _, snap := range snaps {
			link := filepath.Join(repo, "snapshots", snap.Name(), p)
			if t, err := filepath.EvalSymlinks(link); err == nil && filepath.Dir(t) == blobs {
				targets[t] = true
			}
			if _, err := os.Lstat(link); err == nil {
				if err := r.remove(link, true); err != nil { // a copy, not a link, holds data
					return err
				}
			}
		}
	}
	// Blobs still linked from elsewhere in the repo stay.
	filepath.WalkDir(filepath.Join(repo, "snapshots"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if t, err := filepath.EvalSymlinks(p); err == nil {
				delete(targets, t)
			}
		}
		return nil
	})
	for t := range targets {
		if err := r.remove(t, true); err != nil {
			return err
		}
	}
	return nil
}

// removeOllama removes a manifest, then its blobs that no other manifest
// names.
func (r *Removed) removeOllama(store, manifest string) error {
	root := filepath.Join(store, "manifests")
	if rel, err := filepath.Rel(root, manifest); manifest == "" || err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("manifest %q is not in %s", manifest, root)
	}
	mine, err := manifestBlobs(manifest)
	if err != nil {
		return err
	}
	if err := r.remove(manifest, false); err != nil {
		return err
	}
	walk(root, func(p string, d fs.DirEntry) {
		if others, err := manifestBlobs(p); err == nil {
			for b := range others {
				delete(mine, b)
			}
		}
	})
	for b := range mine {
		if err := r.remove(filepath.Join(store, "blobs", b), true); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// manifestBlobs are the blob file names (sha256-<hex>) a manifest names:
// its config and every layer.
func manifestBlobs(path string) (map[string]bool, error) {
	m, err := readOllamaManifest(path)
	if err != nil {
		return nil, err
	}
	return m.blobs(), nil
}
