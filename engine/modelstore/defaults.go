package modelstore

import "encoding/json"

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

// readDefaults reads a params layer's blob. One that does not parse, or
// sets none of the Defaults, gives none: the model still runs.
func readDefaults(path string) *Defaults {
	p, err := readSmall(path, maxParams)
	if err != nil {
		return nil
	}
	var d Defaults
	if json.Unmarshal(p, &d) != nil || d.Temperature == nil && d.TopP == nil && d.TopK == nil && d.NumPredict == nil && d.Stop == nil {
		return nil
	}
	return &d
}
