package pull

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
	"github.com/orrery-cluster/orrery/internal/transfer"
)

// The Ollama registry speaks the OCI distribution API: a manifest per
// name and tag (/v2/{namespace}/{name}/manifests/{tag}) lists layers by
// media type and sha256 digest, and each layer is a blob
// (/v2/{namespace}/{name}/blobs/{digest}, usually redirected to a CDN).
// Pulled models land in Ollama's layout, so that Ollama and Orrery's
// scanner both see them:
//
//	{models}/manifests/{host}/{namespace}/{name}/{tag}
//	{models}/blobs/sha256-{hex}
//
// The template, params, system and license layers come along: Ollama
// uses them; Orrery reads the GGUF's own chat template.

// DefaultRegistry is Ollama's registry.
const DefaultRegistry = "https://registry.ollama.ai"

// Media types of Ollama manifests.
const (
	mediaModel    = "application/vnd.ollama.image.model"
	maxLayers     = 32
	maxManifest   = 1 << 20
	manifestV2    = "application/vnd.docker.distribution.manifest.v2+json"
	ociManifestV1 = "application/vnd.oci.image.manifest.v1+json"
)

var (
	ollamaPart = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,79}$`)
	ollamaTag  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestRe   = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// OllamaRef is a parsed registry reference: [namespace/]name[:tag].
type OllamaRef struct {
	Namespace, Name, Tag string
}

// String is namespace/name:tag.
func (r OllamaRef) String() string { return r.Namespace + "/" + r.Name + ":" + r.Tag }

// ParseOllamaRef reads name, name:tag or namespace/name[:tag] (namespace
// library and tag latest by default).
func ParseOllamaRef(ref string) (OllamaRef, error) {
	name, tag, ok := strings.Cut(ref, ":")
	if !ok {
		tag = "latest"
	}
	r := OllamaRef{Namespace: "library", Name: name, Tag: tag}
	if ns, n, ok := strings.Cut(name, "/"); ok {
		r.Namespace, r.Name = ns, n
	}
	if !ollamaPart.MatchString(r.Namespace) || !ollamaPart.MatchString(r.Name) || !ollamaTag.MatchString(r.Tag) ||
		strings.Contains(ref, "..") {
		return OllamaRef{}, fmt.Errorf("%q: want [namespace/]name[:tag] (lower-case letters, digits, '.', '_', '-'; no '..')", ref)
	}
	return r, nil
}

// Registry reaches an OCI registry that serves Ollama models.
type Registry struct {
	URL    string // DefaultRegistry when empty
	Client *http.Client
}

// Layer is one blob of a manifest.
type Layer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// Manifest is an image manifest, as Ollama's registry serves it.
type Manifest struct {
	SchemaVersion int     `json:"schemaVersion"`
	MediaType     string  `json:"mediaType"`
	Config        Layer   `json:"config"`
	Layers        []Layer `json:"layers"`
}

func (g Registry) base() string {
	if g.URL == "" {
		return DefaultRegistry
	}
	return strings.TrimRight(g.URL, "/")
}

// Host is the registry's host, as Ollama names its manifests directory.
func (g Registry) Host() string {
	u, err := url.Parse(g.base())
	if err != nil {
		return "registry"
	}
	return u.Host
}

// Manifest fetches and checks ref's manifest; it also returns its bytes,
// which go to disk as they came.
func (g Registry) Manifest(ctx context.Context, ref OllamaRef) (Manifest, []byte, error) {
	u := fmt.Sprintf("%s/v2/%s/%s/manifests/%s", g.base(), ref.Namespace, ref.Name, ref.Tag)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Manifest{}, nil, err
	}
	req.Header.Set("Accept", manifestV2+", "+ociManifestV1)
	c := g.Client
	if c == nil {
		c = transfer.Client()
	}
	resp, err := c.Do(req)
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("manifest of %s: %w", ref, err)
	}
	resp.Body = transfer.Watch(resp.Body, transfer.DefaultStall, resp.Request.URL.Host)
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return Manifest{}, nil, fmt.Errorf("%s: no such model on %s", ref, g.base())
	case resp.StatusCode != http.StatusOK:
		return Manifest{}, nil, fmt.Errorf("manifest of %s: %s", ref, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxManifest+1))
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("manifest of %s: %w", ref, err)
	}
	if len(b) > maxManifest {
		return Manifest{}, nil, fmt.Errorf("manifest of %s: over %d bytes", ref, maxManifest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, nil, fmt.Errorf("manifest of %s: %w", ref, err)
	}
	if err := m.check(); err != nil {
		return Manifest{}, nil, fmt.Errorf("manifest of %s: %w", ref, err)
	}
	return m, b, nil
}

// check bounds what a manifest may ask for: digests that are sha256 hex
// (so blob paths stay in the store), sane sizes, one model layer.
func (m Manifest) check() error {
	if len(m.Layers) == 0 || len(m.Layers) > maxLayers {
		return fmt.Errorf("%d layers (1..%d)", len(m.Layers), maxLayers)
	}
	models := 0
	for _, l := range append([]Layer{m.Config}, m.Layers...) {
		if !digestRe.MatchString(l.Digest) {
			return fmt.Errorf("layer digest %q refused (want sha256:<64 hex>)", l.Digest)
		}
		if l.Size < 0 || l.Size > MaxFileSize {
			return fmt.Errorf("layer %s says %d bytes (limit %d)", l.Digest, l.Size, int64(MaxFileSize))
		}
		if l.MediaType == mediaModel {
			models++
		}
	}
	if models != 1 {
		return fmt.Errorf("%d model layers, want 1", models)
	}
	return nil
}

// BlobURL is where a layer of ref is fetched from.
func (g Registry) BlobURL(ref OllamaRef, digest string) string {
	return fmt.Sprintf("%s/v2/%s/%s/blobs/%s", g.base(), ref.Namespace, ref.Name, digest)
}

// OllamaStore places models in Ollama's layout under Dir.
type OllamaStore struct{ Dir string }

// Blob is where a layer with this digest goes.
func (s OllamaStore) Blob(digest string) string {
	return filepath.Join(s.Dir, "blobs", strings.Replace(digest, ":", "-", 1))
}

// WriteManifest writes a pulled manifest, atomically, once its blobs are
// in: only then does the model show.
func (s OllamaStore) WriteManifest(host string, ref OllamaRef, raw []byte) error {
	if host == "" || strings.ContainsAny(host, `/\`) || strings.Contains(host, "..") {
		return fmt.Errorf("registry host %q refused", host)
	}
	p := filepath.Join(s.Dir, "manifests", host, ref.Namespace, ref.Name, ref.Tag)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(p, raw, 0o644)
}

// ModelID is the id the scanner gives the model.
func (s OllamaStore) ModelID(host string, ref OllamaRef) string {
	if host == "registry.ollama.ai" && ref.Namespace == "library" {
		return ref.Name + ":" + ref.Tag
	}
	return host + "/" + ref.Namespace + "/" + ref.Name + ":" + ref.Tag
}
