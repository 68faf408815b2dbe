package api

import (
	"encoding/json"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Response bodies of the API that have no home type elsewhere (the state,
// cluster and discovery packages own theirs). Fields are in the order of
// their JSON names, as the maps these replaced marshalled them.

// HealthResponse answers GET /healthz.
type HealthResponse struct {
	LastEventAppliedIdx int64  `json:"lastEventAppliedIdx"`
	NodeID              string `json:"nodeId"`
	Status              string `json:"status"`
	Version             string `json:"version"`
}

// InstanceDeleted answers DELETE /instance/{id}.
type InstanceDeleted struct {
	Deleted string `json:"deleted"`
}

// TraceList answers GET /v1/traces, newest first.
type TraceList struct {
	Traces []tracestore.Meta `json:"traces"`
}

// TraceStats answers GET /v1/traces/{id}/stats (an alias, so that API
// clients above agent/ need not import the engine).
type TraceStats = trace.Stats

// TraceDeleted answers DELETE /v1/traces/{id}.
type TraceDeleted struct {
	Deleted bool   `json:"deleted"`
	TaskID  string `json:"taskId"`
}

// TraceOpened answers POST /v1/traces/{id}/open: Opened with the page's URL,
// or (with a 501 or 502 status) Error and the URL to open by hand.
type TraceOpened struct {
	Error  string `json:"error,omitempty"`
	Opened bool   `json:"opened,omitempty"`
	TaskID string `json:"taskId,omitempty"`
	URL    string `json:"url"`
}

// TokenIDs answers POST /tokenize without with_pieces.
type TokenIDs struct {
	Tokens []int32 `json:"tokens"`
}

// TokenPieces answers POST /tokenize with with_pieces.
type TokenPieces struct {
	Tokens []TokenPiece `json:"tokens"`
}

// TokenPiece is a token with its text: a JSON string when the text is
// valid UTF-8, else its bytes as an array of numbers (as llama.cpp
// answers).
type TokenPiece struct {
	ID    int32           `json:"id"`
	Piece json.RawMessage `json:"piece"`
}

// Detokenized answers POST /detokenize.
type Detokenized struct {
	Content string `json:"content"`
}

// ModelList answers GET /v1/models.
type ModelList struct {
	Data   []ModelEntry `json:"data"`
	Object string       `json:"object"` // "list"
}

// ModelEntry is one /v1/models item: OpenAI's fields plus where the model
// is and whether it runs.
type ModelEntry struct {
	ID      string    `json:"id"`
	Object  string    `json:"object"`
	Created int64     `json:"created"`
	OwnedBy string    `json:"owned_by"`
	Orrery  ModelInfo `json:"orrery"`
}

// ModelInfo is Orrery's part of a /v1/models item.
type ModelInfo struct {
	// Running is set when an instance serves the model.
	Running   bool     `json:"running"`
	Instances []string `json:"instances"`
	// Nodes have the model on disk.
	Nodes        []string      `json:"nodes"`
	Arch         string        `json:"arch,omitempty"`
	Layers       int           `json:"layers,omitempty"`
	Quantization string        `json:"quantization,omitempty"`
	Size         *state.Memory `json:"size,omitempty"`
	// Keep-alive of the running instances: Pinned when one is kept until
	// deleted; Active requests running; ExpiresAt, when the model is
	// unloaded if no request comes (absent while pinned or busy).
	Pinned    bool       `json:"pinned,omitempty"`
	Active    int        `json:"active,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// ClusterHash answers GET /cluster/hash/{idx}.
type ClusterHash struct {
	Idx       int64  `json:"idx"`
	StateHash string `json:"stateHash"`
}
