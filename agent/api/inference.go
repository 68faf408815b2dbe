package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Inference is the node's model serving: placement on this node, local
// completions, and the way to other nodes for the rest.
type Inference interface {
	// Route picks the instance that serves model: its id and the node of
	// its rank 0, which drives generation. It replaces a failed instance
	// (placing anew), places one when the model has none but a node has
	// its file (load on demand: one placement however many requests
	// ask), and wraps ErrModelNotFound when no node has it. keepAlive
	// (nil: the agent's default) is an on-demand placement's keep-alive.
	Route(ctx context.Context, model string, keepAlive *KeepAlive) (instanceID, node string, err error)
	// Hold marks a request running on an instance whose rank 0 is here,
	// until release: a held instance is never unloaded as idle. Its
	// keep-alive counts from the release; keepAlive (nil: the instance's
	// own) becomes the instance's. ErrUnloading when its expiry came first.
	Hold(instanceID string, keepAlive *KeepAlive) (release func(), err error)
	// Progress is how far an instance's ranks have loaded; ErrLoadFailed
	// names the rank that failed.
	Progress(instanceID string) (LoadProgress, error)
	// PickNode is the node that places model: this one if it has it,
	// else one that does.
	PickNode(model string) (string, error)
	// Place creates an instance of a model this node has, as req says;
	// existed reports that the model already ran on the same set of nodes
	// and in is that instance (see PlaceRequest.Duplicate).
	Place(ctx context.Context, req PlaceRequest) (in state.Instance, existed bool, err error)
	// Previews lists candidate placements of a model this node has, its
	// ranks' blocks on their nodes' GPUs as gpuLayers says (nil: each
	// node's default).
	Previews(model string, gpuLayers *runnerapi.GPULayers) (PreviewsResponse, error)
	// Delete stops and removes an instance placed on this node.
	Delete(ctx context.Context, instanceID string) error
	// Complete runs a completion on an instance on this node; its spans
	// become trace traceID ("" runs it untraced).
	Complete(ctx context.Context, instanceID, traceID string, req runnerapi.Request, onPiece func(runnerapi.Piece) error) (*runnerapi.Done, error)
	// Embed runs an embedding request on an instance on this node
	// (traceID as Complete's).
	Embed(ctx context.Context, instanceID, traceID string, req runnerapi.EmbedRequest) (*runnerapi.EmbedResponse, error)
	// Peer is an HTTP client whose requests to http://<node id>/… reach
	// that node's peer API over an authenticated stream link.
	Peer() *http.Client
	// Vocab is the tokenizer of a model this node has on disk (read from
	// its GGUF header); ErrNotHere when the node lacks the file.
	Vocab(model string) (Vocab, error)
}

// Vocab is what /tokenize and /detokenize need of a model's tokenizer. It
// is safe for concurrent use.
type Vocab interface {
	Encode(s string, addSpecial bool) ([]int32, error)
	Decode(ids []int32) (string, error)
	VocabSize() int
}

// LoadProgress is how far an instance's ranks have loaded: their layers
// loaded of their total, and whether every rank is ready.
type LoadProgress struct {
	Loaded, Total int
	Ready         bool
}

// Errors an Inference returns, mapped to HTTP statuses by inferenceStatus.
var (
	ErrLoadFailed      = errors.New("loading failed")
	ErrModelNotRunning = errors.New("model not running")
	ErrModelNotFound   = errors.New("model not found")
	ErrNoMemory        = errors.New("model does not fit")
	ErrConflict        = errors.New("conflict")
	ErrNotHere         = errors.New("not on this node")
	ErrUnloading       = errors.New("instance unloading")
)

// inferenceStatus maps an Inference error to an HTTP status and an
// OpenAI error type and code.
func inferenceStatus(err error) (status int, typ, code string) {
	switch {
	case errors.Is(err, runnerapi.ErrPromptTooLong):
		return http.StatusBadRequest, "invalid_request_error", "context_length_exceeded"
	case errors.Is(err, runnerapi.ErrBadRequest):
		return http.StatusBadRequest, "invalid_request_error", "invalid_value"
	case errors.Is(err, ErrModelNotRunning), errors.Is(err, ErrModelNotFound):
		return http.StatusNotFound, "invalid_request_error", "model_not_found"
	case errors.Is(err, ErrNoMemory):
		return http.StatusInsufficientStorage, "server_error", "insufficient_memory"
	case errors.Is(err, ErrCancelled):
		return 499, "invalid_request_error", "cancelled"
	case errors.Is(err, ErrLoadFailed), errors.Is(err, ErrUnloading):
		return http.StatusServiceUnavailable, "server_error", "load_failed"
	case errors.Is(err, ErrConflict):
		return http.StatusConflict, "invalid_request_error", "conflict"
	case errors.Is(err, ErrNotHere):
		return http.StatusNotFound, "invalid_request_error", "not_found"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "server_error", "timeout"
	}
	var re *runnerapi.RequestError
	if errors.As(err, &re) {
		switch re.Kind {
		case "prompt_too_long":
			return http.StatusBadRequest, "invalid_request_error", "context_length_exceeded"
		case "bad_request":
			return http.StatusBadRequest, "invalid_request_error", "invalid_value"
		}
	}
	return http.StatusServiceUnavailable, "server_error", "runner_unavailable"
}

// PreviewsResponse answers GET /instance/previews.
type PreviewsResponse struct {
	Model      string              `json:"model"`
	Layers     int                 `json:"layers"`
	ModelBytes uint64              `json:"modelBytes"`
	ContextLen int                 `json:"contextLength"`
	Previews   []placement.Preview `json:"previews"`
	// Plans are the cost model's predictions of every candidate plan
	// (pipelines over the first k nodes, tensor-parallel groups over the
	// first T), and Auto the one "parallelism": "auto" would place ("":
	// none can be predicted yet, so auto places a pipeline).
	Plans []runnerapi.Prediction `json:"plans"`
	Auto  string                 `json:"auto"`
	// GPULayers is the request's ?gpuLayers= (absent: each node's
	// default), which a placement with the same "gpuLayers" would use.
	GPULayers *runnerapi.GPULayers `json:"gpuLayers,omitempty"`
}
