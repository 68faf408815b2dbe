package modelstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// Ollama's store: manifests/<host>/<namespace>/<model>/<tag> name their
// layers' blobs, blobs/sha256-<hex>. What the scanner, the model's
// defaults and Remove read of a manifest is read here, once.

// Media types of the layers Orrery reads.
const (
	ollamaModelMedia  = "application/vnd.ollama.image.model"
	ollamaParamsMedia = "application/vnd.ollama.image.params"
)

// ollamaDigest is the only digest form turned into a blob path.
var ollamaDigest = regexp.MustCompile(`^sha256[:-]([0-9a-f]{64})$`)

// ollamaManifest is what Orrery reads of a manifest.
type ollamaManifest struct {
	Config struct {
		Digest string `json:"digest"`
	} `json:"config"`
	Layers []struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
	} `json:"layers"`
}

func readOllamaManifest(path string) (ollamaManifest, error) {
	b, err := readSmall(path, 1<<20)
	if err != nil {
		return ollamaManifest{}, err
	}
	var m ollamaManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return ollamaManifest{}, fmt.Errorf("manifest %s: %w", path, err)
	}
	return m, nil
}

// ollamaBlobName is a digest's blob file name, sha256-<64 hex digits>;
// any other digest is none.
func ollamaBlobName(digest string) (string, bool) {
	mm := ollamaDigest.FindStringSubmatch(digest)
	if mm == nil {
		return "", false
	}
	return "sha256-" + mm[1], true
}

// modelBlob is the blob file name of the model layer (the first).
func (m ollamaManifest) modelBlob() (string, error) {
	for _, l := range m.Layers {
		if l.MediaType == ollamaModelMedia {
			name, ok := ollamaBlobName(l.Digest)
			if !ok {
				return "", fmt.Errorf("digest %q", l.Digest)
			}
			return name, nil
		}
	}
	return "", errors.New("no model layer")
}

// paramsBlob is the blob file name of the first params layer with a
// well-formed digest.
func (m ollamaManifest) paramsBlob() (string, bool) {
	for _, l := range m.Layers {
		if name, ok := ollamaBlobName(l.Digest); ok && l.MediaType == ollamaParamsMedia {
			return name, true
		}
	}
	return "", false
}

// blobs are the blob file names of every well-formed digest the manifest
// names: its config and every layer.
func (m ollamaManifest) blobs() map[string]bool {
	out := map[string]bool{}
	if name, ok := ollamaBlobName(m.Config.Digest); ok {
		out[name] = true
	}
	for _, l := range m.Layers {
		if name, ok := ollamaBlobName(l.Digest); ok {
			out[name] = true
		}
	}
	return out
}

// parseOllamaManifest returns the blob file name of a manifest's model
// layer: sha256-<64 hex digits>, nothing else.
func parseOllamaManifest(b []byte) (string, error) {
	var m ollamaManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	return m.modelBlob()
}
