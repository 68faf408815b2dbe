package model

import (
	"encoding/json"
	"path/filepath"
)

// Defaults are the generation settings a model comes with: an Ollama
// model's params layer (Modelfile PARAMETER lines), under Ollama's names.
// Requests that set a value keep theirs.
type Defaults struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	NumPredict  *int     `json:"num_predict,omitempty"`
	Stop        []string `json:"stop,omitempty"`
}

// Params layers are small; one over this is not read.
const maxParams = 64 << 10

// ollamaDefaults reads the params layer a manifest names, if any. A
// params blob that does not parse gives none: the model still runs.
func ollamaDefaults(store, manifest string) *Defaults {
	b, err := readSmall(manifest, 1<<20)
	if err != nil {
		return nil
	}
	var m struct {
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
	}
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	for _, l := range m.Layers {
		mm := ollamaDigest.FindStringSubmatch(l.Digest)
		if l.MediaType != "application/vnd.ollama.image.params" || mm == nil {
			continue
		}
		p, err := readSmall(filepath.Join(store, "blobs", "sha256-"+mm[1]), maxParams)
		if err != nil {
			return nil
		}
		var d Defaults
		if json.Unmarshal(p, &d) != nil || d.Temperature == nil && d.TopP == nil && d.TopK == nil && d.NumPredict == nil && d.Stop == nil {
			return nil
		}
		return &d
	}
	return nil
}
