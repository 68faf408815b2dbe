package pull

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/orrery-cluster/orrery/internal/transfer"
)

// Hugging Face, as Ollama's hf.co syntax names it: hf.co/{org}/{repo}
// with an optional :{quant} tag that picks the GGUF file by name (default
// Q4_K_M, as Ollama's). The file list comes from the hub's tree API, with
// each LFS file's sha256 (lfs.oid); files come from /resolve/main/, which
// redirects to a CDN. They land in the HF cache layout, so that the
// huggingface_hub tools and Orrery's scanner see them:
//
//	models--{org}--{repo}/blobs/{sha256}
//	models--{org}--{repo}/snapshots/{commit}/{file} → ../../blobs/{sha256}
//	models--{org}--{repo}/refs/main                  {commit}

// DefaultHFEndpoint is the hub; HF_ENDPOINT overrides it.
const DefaultHFEndpoint = "https://huggingface.co"

// DefaultQuant is the file picked when the reference names none.
const DefaultQuant = "Q4_K_M"

// maxListing bounds the tree listing read from the hub.
const maxListing = 16 << 20

var (
	repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	quantTag = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	splitRe  = regexp.MustCompile(`-(\d{5})-of-(\d{5})\.gguf$`)
)

// HFRef is a parsed hf.co reference.
type HFRef struct {
	Repo  string // org/repo
	Quant string
}

// ParseHFRef reads hf.co/{org}/{repo}[:{quant}] (huggingface.co/ too).
func ParseHFRef(ref string) (HFRef, bool, error) {
	rest, ok := strings.CutPrefix(ref, "hf.co/")
	if !ok {
		if rest, ok = strings.CutPrefix(ref, "huggingface.co/"); !ok {
			return HFRef{}, false, nil
		}
	}
	repo, quant, _ := strings.Cut(rest, ":")
	parts := strings.Split(repo, "/")
	if len(parts) != 2 || !repoPart.MatchString(parts[0]) || !repoPart.MatchString(parts[1]) ||
		strings.Contains(repo, "..") {
		return HFRef{}, true, fmt.Errorf("%q: want hf.co/{org}/{repo}[:{quant}] (letters, digits, '.', '_', '-'; no '..')", ref)
	}
	if quant == "" {
		quant = DefaultQuant
	} else if !quantTag.MatchString(quant) {
		return HFRef{}, true, fmt.Errorf("%q: bad quant tag %q", ref, quant)
	}
	return HFRef{Repo: repo, Quant: quant}, true, nil
}

// HF reaches a Hugging Face hub.
type HF struct {
	Endpoint string // DefaultHFEndpoint when empty
	Token    string // HF_TOKEN, sent as a bearer token to the hub
	Client   *http.Client
}

// HFFile is one file of a repo to fetch.
type HFFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	LFS  *struct {
		Oid  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

func (h HF) endpoint() string {
	if h.Endpoint == "" {
		return DefaultHFEndpoint
	}
	return strings.TrimRight(h.Endpoint, "/")
}

func (h HF) client() *http.Client {
	if h.Client == nil {
		return transfer.Client()
	}
	return h.Client
}

// Header is what requests to the hub carry.
func (h HF) Header() http.Header {
	hd := http.Header{"User-Agent": {"orrery"}}
	if h.Token != "" {
		hd.Set("Authorization", "Bearer "+h.Token)
	}
	return hd
}

// Files lists the GGUF files of ref's quant: one file, or every part of a
// split GGUF, in order.
func (h HF) Files(ctx context.Context, ref HFRef) ([]HFFile, error) {
	u := h.endpoint() + "/api/models/" + ref.Repo + "/tree/main?recursive=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header = h.Header()
	resp, err := h.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", ref.Repo, err)
	}
	resp.Body = transfer.Watch(resp.Body, transfer.DefaultStall, resp.Request.URL.Host)
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s: no such repo on %s (or it is private: set HF_TOKEN)", ref.Repo, h.endpoint())
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("%s: %s (a gated or private model needs HF_TOKEN)", ref.Repo, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("list %s: %s", ref.Repo, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxListing+1))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", ref.Repo, err)
	}
	if len(b) > maxListing {
		return nil, fmt.Errorf("list %s: listing over %d bytes", ref.Repo, maxListing)
	}
	var tree []treeEntry
	if err := json.Unmarshal(b, &tree); err != nil {
		return nil, fmt.Errorf("list %s: %w", ref.Repo, err)
	}
	return pickFiles(ref, tree)
}

// pickFiles chooses the quant's GGUF files from a repo's tree and checks
// what the hub said of them.
func pickFiles(ref HFRef, tree []treeEntry) ([]HFFile, error) {
	var ggufs, picked []string
	byPath := map[string]treeEntry{}
	for _, e := range tree {
		if e.Type != "file" || !strings.HasSuffix(strings.ToLower(e.Path), ".gguf") {
			continue
		}
		ggufs = append(ggufs, e.Path)
		byPath[e.Path] = e
		if strings.Contains(strings.ToUpper(path.Base(e.Path)), strings.ToUpper(ref.Quant)) {
			picked = append(picked, e.Path)
		}
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("%s has no GGUF file for %q (GGUF files: %s)", ref.Repo, ref.Quant, strings.Join(ggufs, ", "))
	}
	slices.Sort(picked)
	// One model: a single file, or the parts of one split file.
	first := picked[0]
	if m := splitRe.FindStringSubmatch(first); m != nil {
		prefix := strings.TrimSuffix(first, m[0])
		var parts []string
		for _, p := range picked {
			if strings.HasPrefix(p, prefix) && splitRe.MatchString(p) {
				parts = append(parts, p)
			}
		}
		if want := splitRe.FindStringSubmatch(first)[2]; fmt.Sprintf("%05d", len(parts)) != want {
			return nil, fmt.Errorf("%s: split GGUF %s has %d of its %s parts", ref.Repo, prefix, len(parts), strings.TrimLeft(want, "0"))
		}
		picked = parts
	} else {
		picked = picked[:1]
	}
	var out []HFFile
	for _, p := range picked {
		e := byPath[p]
		if err := safeRel(p); err != nil {
			return nil, fmt.Errorf("%s: %w", ref.Repo, err)
		}
		if e.LFS == nil || len(e.LFS.Oid) != 64 || strings.Trim(e.LFS.Oid, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("%s: %s has no sha256 (lfs.oid) to verify against", ref.Repo, p)
		}
		size := e.LFS.Size
		if size <= 0 || size > MaxFileSize {
			return nil, fmt.Errorf("%s: %s says %d bytes (limit %d)", ref.Repo, p, size, int64(MaxFileSize))
		}
		out = append(out, HFFile{Path: p, Size: size, SHA256: e.LFS.Oid})
	}
	return out, nil
}

// safeRel refuses a path that could leave the directory it is joined to.
func safeRel(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.Contains(p, "\x00") {
		return fmt.Errorf("file path %q refused", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("file path %q refused", p)
		}
	}
	return nil
}

// ResolveURL is where a file of the repo is fetched from.
func (h HF) ResolveURL(repo, file string) string {
	return h.endpoint() + "/" + repo + "/resolve/main/" + (&url.URL{Path: file}).EscapedPath()
}

// HFCache places a repo's files in the hub cache dir.
type HFCache struct{ Dir string }

// RepoDir is models--{org}--{repo}.
func (c HFCache) RepoDir(repo string) string {
	return filepath.Join(c.Dir, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// Blob is where a file with this sha256 goes.
func (c HFCache) Blob(repo, sha string) string {
	return filepath.Join(c.RepoDir(repo), "blobs", sha)
}

// Link makes snapshots/{commit}/{file} point at its blob, and refs/main
// name the commit.
func (c HFCache) Link(repo, commit string, f HFFile) (string, error) {
	if err := safeRel(f.Path); err != nil {
		return "", err
	}
	if !repoPart.MatchString(commit) {
		return "", fmt.Errorf("commit %q refused", commit)
	}
	dir := c.RepoDir(repo)
	snap := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(snap), 0o755); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(filepath.Dir(snap), c.Blob(repo, f.SHA256))
	if err != nil {
		return "", err
	}
	os.Remove(snap)
	if err := os.Symlink(rel, snap); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, "refs"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "refs", "main"), []byte(commit), 0o644); err != nil {
		return "", err
	}
	return snap, nil
}

// ErrOffline is returned when HF_HUB_OFFLINE forbids the hub.
var ErrOffline = errors.New("HF_HUB_OFFLINE is set: the hub is not reached")

// Commit returns the commit main points at.
func (h HF) Commit(ctx context.Context, repo string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.endpoint()+"/api/models/"+repo+"/revision/main", nil)
	if err != nil {
		return "", err
	}
	req.Header = h.Header()
	resp, err := h.client().Do(req)
	if err != nil {
		return "", fmt.Errorf("revision of %s: %w", repo, err)
	}
	resp.Body = transfer.Watch(resp.Body, transfer.DefaultStall, resp.Request.URL.Host)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("revision of %s: %s", repo, resp.Status)
	}
	var info struct {
		SHA string `json:"sha"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info); err != nil {
		return "", fmt.Errorf("revision of %s: %w", repo, err)
	}
	if !repoPart.MatchString(info.SHA) {
		return "", fmt.Errorf("revision of %s: commit %q refused", repo, info.SHA)
	}
	return info.SHA, nil
}
