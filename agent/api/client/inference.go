package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/chatstream"
)

// TraceIDHeader names the trace of a chat completion in its answer.
const TraceIDHeader = "X-Orrery-Trace-Id"

// Models returns GET /v1/models: every model in the cluster.
func (c *Client) Models(ctx context.Context) ([]api.ModelEntry, error) {
	var l api.ModelList
	err := c.get(ctx, "/v1/models", &l)
	return l.Data, err
}

// Previews returns GET /instance/previews?model=…: the placements the
// model could have, with gpuLayers' blocks on the GPUs (nil: each node's
// default).
func (c *Client) Previews(ctx context.Context, model string, gpuLayers *runnerapi.GPULayers) (api.PreviewsResponse, error) {
	var p api.PreviewsResponse
	q := url.Values{"model": {model}}
	if gpuLayers != nil {
		q.Set("gpuLayers", gpuLayers.String())
	}
	err := c.get(ctx, query("/instance/previews", q), &p)
	return p, err
}

// Place runs POST /instance: places a model, whose runners then load.
func (c *Client) Place(ctx context.Context, req api.PlaceRequest) (api.PlaceResponse, error) {
	var p api.PlaceResponse
	err := c.do(ctx, http.MethodPost, "/instance", req, &p)
	return p, err
}

// DeleteInstance runs DELETE /instance/{id}.
func (c *Client) DeleteInstance(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, path("/instance/", id), nil, &api.InstanceDeleted{})
}

// ChatRequest is the part of an OpenAI chat-completion request the tools
// send.
type ChatRequest struct {
	Model    string        `json:"model"`
	Messages []ChatMessage `json:"messages"`
	// MaxTokens of 0 leaves the model's limit.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Temperature and Seed are the agent's defaults when nil.
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	// IgnoreEOS generates exactly MaxTokens tokens (for benchmarks).
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	// CachePrompt false computes the whole prompt even where a prefix is
	// cached (for benchmarks); nil leaves the cache on.
	CachePrompt *bool `json:"cache_prompt,omitempty"`
	// Speculative asks for speculative decoding (nil: the instance's
	// default, if any).
	Speculative *runnerapi.Speculation `json:"speculative,omitempty"`
	// Stream is set by ChatStream.
	Stream bool `json:"stream"`
}

// ChatMessage is one message of a chat.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatStream runs POST /v1/chat/completions streaming, calling onChunk
// with each chunk as it comes. It returns the request's trace id (from
// the answer's header, "" when untraced) also when the stream fails.
func (c *Client) ChatStream(ctx context.Context, req ChatRequest, onChunk func(chatstream.Chunk)) (traceID string, err error) {
	req.Stream = true
	resp, err := c.open(ctx, http.MethodPost, "/v1/chat/completions", req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	return resp.Header.Get(TraceIDHeader), chatstream.Read(resp.Body, onChunk)
}

// Load loads model (POST /api/generate without a prompt, Ollama's way):
// it returns once an instance serves it, placed on demand if none did.
func (c *Client) Load(ctx context.Context, model string) error {
	resp, err := c.open(ctx, http.MethodPost, "/api/generate", map[string]any{"model": model, "stream": false})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Tokenize runs POST /tokenize with pieces: text's tokens in model's
// vocabulary, with the beginning-of-sequence token when addSpecial.
func (c *Client) Tokenize(ctx context.Context, model, text string, addSpecial bool) ([]api.TokenPiece, error) {
	req := struct {
		Model      string `json:"model"`
		Content    string `json:"content"`
		AddSpecial bool   `json:"add_special"`
		WithPieces bool   `json:"with_pieces"`
	}{model, text, addSpecial, true}
	var out api.TokenPieces
	err := c.do(ctx, http.MethodPost, "/tokenize", req, &out)
	return out.Tokens, err
}

// Detokenize runs POST /detokenize: the text of tokens in model's
// vocabulary.
func (c *Client) Detokenize(ctx context.Context, model string, tokens []int32) (string, error) {
	req := struct {
		Model  string  `json:"model"`
		Tokens []int32 `json:"tokens"`
	}{model, tokens}
	var out api.Detokenized
	err := c.do(ctx, http.MethodPost, "/detokenize", req, &out)
	return out.Content, err
}
