package api

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The embedding routes: OpenAI's POST /v1/embeddings and Ollama's POST
// /api/embed and (older) /api/embeddings. They route like completions
// (startCompletion: load on demand, forwarded to the node of the
// instance's rank 0), and refuse a model without a pooling type before
// loading it.

// embedBody is an embedding request body as a completionBody, so that it
// routes as completions do: its JSON goes into into (the protocol's
// request), parse checks that and gives the runner's request (req).
type embedBody struct {
	into   any
	parse  func() (runnerapi.EmbedRequest, error)
	model  func() string
	ka     func() *KeepAlive
	errOut func(w http.ResponseWriter, status int, typ, code, msg string)
	req    runnerapi.EmbedRequest
}

// openAIEmbedRequest is OpenAI's embeddings request.
type openAIEmbedRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// ollamaEmbedRequest is Ollama's /api/embed request, and (Prompt) its
// older /api/embeddings one.
type ollamaEmbedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Prompt     *string         `json:"prompt"`
	Truncate   *bool           `json:"truncate"`
	Dimensions int             `json:"dimensions"`
	Options    json.RawMessage `json:"options"`
	KeepAlive  *KeepAlive      `json:"keep_alive"`
}

// embedInputs reads an input: a string, an array of strings, an array of
// token ids, or an array of such arrays (tokens allows the last two).
func embedInputs(raw json.RawMessage, tokens bool) ([]runnerapi.EmbedInput, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("input is missing")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return textInputs([]string{one})
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("input: want a string or an array of strings" + map[bool]string{true: " or of token ids", false: ""}[tokens])
	}
	if len(items) == 0 {
		return nil, errors.New("input is an empty array")
	}
	if len(items) > runnerapi.MaxEmbedInputs {
		return nil, fmt.Errorf("input has %d items, at most %d", len(items), runnerapi.MaxEmbedInputs)
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		return textInputs(texts)
	}
	if !tokens {
		return nil, errors.New("input: want a string or an array of strings")
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		in, err := tokenInput(ids, 0)
		return []runnerapi.EmbedInput{in}, err
	}
	var lists [][]int64
	if err := json.Unmarshal(raw, &lists); err != nil {
		return nil, errors.New("input: want a string, an array of strings, an array of token ids or an array of such arrays")
	}
	out := make([]runnerapi.EmbedInput, len(lists))
	for i, l := range lists {
		in, err := tokenInput(l, i)
		if err != nil {
			return nil, err
		}
		out[i] = in
	}
	return out, nil
}

func textInputs(texts []string) ([]runnerapi.EmbedInput, error) {
	out := make([]runnerapi.EmbedInput, len(texts))
	for i, s := range texts {
		if s == "" {
			return nil, fmt.Errorf("input %d is an empty string", i)
		}
		out[i] = runnerapi.EmbedInput{Text: s}
	}
	return out, nil
}

func tokenInput(ids []int64, i int) (runnerapi.EmbedInput, error) {
	if len(ids) == 0 {
		return runnerapi.EmbedInput{}, fmt.Errorf("input %d is an empty array of token ids", i)
	}
	out := make([]int32, len(ids))
	for j, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return runnerapi.EmbedInput{}, fmt.Errorf("input %d: token %d is %d: not a token id", i, j, id)
		}
		out[j] = int32(id)
	}
	return runnerapi.EmbedInput{Tokens: out}, nil
}

func (b *openAIEmbedRequest) toRunner() (runnerapi.EmbedRequest, error) {
	if b.Model == "" {
		return runnerapi.EmbedRequest{}, errors.New("model is required")
	}
	switch b.EncodingFormat {
	case "", "float", "base64":
	default:
		return runnerapi.EmbedRequest{}, fmt.Errorf("encoding_format %q: want float or base64", b.EncodingFormat)
	}
	in, err := embedInputs(b.Input, true)
	if err != nil {
		return runnerapi.EmbedRequest{}, err
	}
	req := runnerapi.EmbedRequest{Inputs: in}
	if b.Dimensions != nil {
		if *b.Dimensions < 1 {
			return req, fmt.Errorf("dimensions %d: want ≥ 1", *b.Dimensions)
		}
		req.Dimensions = *b.Dimensions
	}
	return req, nil
}

func (b *ollamaEmbedRequest) toRunner() (runnerapi.EmbedRequest, error) {
	if b.Model == "" {
		return runnerapi.EmbedRequest{}, errors.New("model is required")
	}
	var in []runnerapi.EmbedInput
	var err error
	if b.Prompt != nil { // /api/embeddings
		in, err = textInputs([]string{*b.Prompt})
	} else {
		in, err = embedInputs(b.Input, false)
	}
	if err != nil {
		return runnerapi.EmbedRequest{}, err
	}
	if b.Dimensions < 0 {
		return runnerapi.EmbedRequest{}, fmt.Errorf("dimensions %d: want ≥ 1", b.Dimensions)
	}
	return runnerapi.EmbedRequest{Inputs: in, Truncate: b.Truncate == nil || *b.Truncate, Dimensions: b.Dimensions}, nil
}

func (e *embedBody) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, e.into) }
func (e *embedBody) modelID() string              { return e.model() }
func (e *embedBody) keepAlive() *KeepAlive        { return e.ka() }
func (e *embedBody) writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	e.errOut(w, status, typ, code, msg)
}

func (e *embedBody) toRunner() (runnerapi.Request, error) {
	var err error
	e.req, err = e.parse()
	return runnerapi.Request{}, err
}

// modelPooling is how a model the cluster lists pools, and its arch;
// found false when no node lists it, and unusable the reason when every
// node that lists it cannot serve it.
func (s *Server) modelPooling(model string) (pooling, arch, unusable string, found bool) {
	if s.Store == nil {
		return "", "", "", false
	}
	for _, nm := range s.Store.State().NodeModels {
		for _, m := range nm.Models {
			switch {
			case m.ID != model:
			case m.Error == "":
				return m.Pooling, m.Arch, "", true
			default:
				unusable, found = m.Error, true
			}
		}
	}
	return "", "", unusable, found
}

// notEmbedding refuses, before anything loads, a model the cluster lists
// without a pooling type (a chat model), as a reranker, or as one it
// cannot serve (an architecture Orrery does not run, such as BERT's or
// EmbeddingGemma's, named by the scan's error); a model no node lists is
// left to routing, which says so.
func (s *Server) notEmbedding(model string) error {
	pooling, arch, unusable, found := s.modelPooling(model)
	switch {
	case !found, pooling == "mean", pooling == "cls", pooling == "last":
		return nil
	case unusable != "":
		return fmt.Errorf("model %q cannot serve embeddings here: %s", model, unusable)
	case pooling == "rank":
		return fmt.Errorf("model %q is a reranker (pooling type rank), not an embedding model", model)
	}
	return fmt.Errorf("model %q is not an embedding model: its GGUF sets no %s.pooling_type (a chat model)", model, arch)
}

// runEmbed routes and runs an embedding request; ok false when it was
// answered (an error, or forwarded to another node).
func (s *Server) runEmbed(w http.ResponseWriter, r *http.Request, forwarded bool, path string, body *embedBody) (*runnerapi.EmbedResponse, *completionRun, bool) {
	parse := body.parse
	body.parse = func() (runnerapi.EmbedRequest, error) {
		req, err := parse()
		if err == nil {
			err = s.notEmbedding(body.modelID())
		}
		return req, err
	}
	c, ok := s.startCompletion(w, r, forwarded, path, "embeddings body", "embd-", body)
	if !ok {
		return nil, nil, false
	}
	defer c.release()
	if err := s.awaitLoad(r.Context(), nil, c.instanceID); err != nil {
		writeRunError(w, body, err)
		return nil, nil, false
	}
	res, err := s.Inference.Embed(r.Context(), c.instanceID, c.traceID, body.req)
	if err != nil {
		writeRunError(w, body, err)
		return nil, nil, false
	}
	if s.Metrics != nil {
		s.Metrics.ObserveRequest(time.Since(c.start), res.PromptTokens, 0, 0, 0)
	}
	return res, &c, true
}

func (s *Server) openAIEmbeddings(w http.ResponseWriter, r *http.Request, forwarded bool) {
	var req openAIEmbedRequest
	body := &embedBody{into: &req, parse: req.toRunner, model: func() string { return req.Model }, ka: func() *KeepAlive { return nil },
		errOut: openAIError}
	res, c, ok := s.runEmbed(w, r, forwarded, "/v1/embeddings", body)
	if !ok {
		return
	}
	data := make([]map[string]any, len(res.Embeddings))
	for i, v := range res.Embeddings {
		var emb any = []float32(v)
		if req.EncodingFormat == "base64" {
			emb = base64Floats(v)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": req.Model,
		"usage":  map[string]int{"prompt_tokens": res.PromptTokens, "total_tokens": res.PromptTokens},
		"orrery": map[string]any{"traceId": c.traceID, "node": s.NodeID, "instanceId": c.instanceID, "durationMs": round3(float64(res.Ns) / 1e6)}})
}

// base64Floats is OpenAI's base64 encoding: the little-endian float32s.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request, forwarded bool) {
	legacy := r.URL.Path == "/api/embeddings"
	var req ollamaEmbedRequest
	body := &embedBody{into: &req, parse: req.toRunner, model: func() string { return req.Model }, ka: func() *KeepAlive { return req.KeepAlive },
		errOut: func(w http.ResponseWriter, status int, _, _, msg string) { ollamaError(w, status, msg) }}
	if legacy {
		body.parse = func() (runnerapi.EmbedRequest, error) {
			if req.Prompt == nil {
				return runnerapi.EmbedRequest{}, errors.New("prompt is required")
			}
			return req.toRunner()
		}
	}
	res, c, ok := s.runEmbed(w, r, forwarded, r.URL.Path, body)
	if !ok {
		return
	}
	if legacy {
		writeJSON(w, http.StatusOK, map[string]any{"embedding": []float32(res.Embeddings[0])})
		return
	}
	embs := make([][]float32, len(res.Embeddings))
	for i, v := range res.Embeddings {
		embs[i] = v
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": req.Model, "embeddings": embs,
		"total_duration": time.Since(c.start).Nanoseconds(), "load_duration": 0, "prompt_eval_count": res.PromptTokens})
}
