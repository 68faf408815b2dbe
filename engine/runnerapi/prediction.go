package runnerapi

// Prediction is a plan's predicted speed: the cost model's (engine/placement),
// kept with the instance placed on it.
type Prediction struct {
	// Plan is the shape's name (Shape.String), for readers of the JSON.
	Plan string `json:"plan"`
	Shape
	Nodes []string `json:"nodes"`
	// DecodeMs is one token's decode step at Position; CommMs the part
	// of it spent on messages.
	DecodeMs        float64 `json:"decodeMsPerToken"`
	CommMs          float64 `json:"commMsPerToken"`
	DecodeTokPerSec float64 `json:"decodeTokPerSec"`
	// PrefillMs is a prompt of PrefillTokens tokens.
	PrefillMs        float64 `json:"prefillMs"`
	PrefillTokens    int     `json:"prefillTokens"`
	PrefillTokPerSec float64 `json:"prefillTokPerSec"`
	// HostCrossings counts the trips through the host that blocks on a
	// GPU add to a decode step (each tensor-parallel sum of such a block,
	// the gather of a head there, a rank split between its GPU and its
	// CPU): their cost is in DecodeMs.
	HostCrossings int `json:"hostCrossings,omitempty"`
	// Fits says whether every rank fits its node's memory (Error: why
	// not, or why it could not be predicted).
	Fits  bool   `json:"fits"`
	Error string `json:"error,omitempty"`
	// Assumed lists what stood in for a missing measurement; Measured the
	// figures taken from an earlier run instead of the formula.
	Assumed  []string `json:"assumed,omitempty"`
	Measured []string `json:"measured,omitempty"`
}
