package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/runner"
)

// POST /v1/completions: OpenAI's legacy completions, on the same path as
// chat (routing, forwarding, tracing), with a raw prompt (a string or
// token ids) and logprobs in the legacy shape.

// completionRequest is the part of OpenAI's legacy completion request
// Orrery uses; other fields are accepted and ignored, as SDKs send many.
type completionRequest struct {
	Model       string          `json:"model"`
	Prompt      json.RawMessage `json:"prompt"`
	Stream      bool            `json:"stream"`
	MaxTokens   *int            `json:"max_tokens"`
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
	TopK        *int            `json:"top_k"`
	Seed        *int64          `json:"seed"`
	Stop        json.RawMessage `json:"stop"`
	N           *int            `json:"n"`
	BestOf      *int            `json:"best_of"`
	// Logprobs (0..runner.MaxTopLogprobs) reports each generated token's
	// logprob and the Logprobs most likely tokens at its position.
	Logprobs  *int `json:"logprobs"`
	Echo      bool `json:"echo"`
	IgnoreEOS bool `json:"ignore_eos"`
}

// toRunner turns the request into the runner's terms.
func (c *completionRequest) toRunner() (runner.Request, error) {
	var req runner.Request
	if c.Model == "" {
		return req, errors.New("model is required")
	}
	if c.N != nil && *c.N != 1 {
		return req, fmt.Errorf("n = %d: only 1 is supported", *c.N)
	}
	if c.BestOf != nil && *c.BestOf != 1 {
		return req, fmt.Errorf("best_of = %d: only 1 is supported", *c.BestOf)
	}
	if err := c.prompt(&req); err != nil {
		return req, err
	}
	if c.MaxTokens != nil {
		if *c.MaxTokens < 0 {
			return req, fmt.Errorf("max_tokens %d: want ≥ 0", *c.MaxTokens)
		}
		req.MaxTokens = *c.MaxTokens
	}
	req.Sample = sampleOptions(c.Temperature, c.TopP, c.TopK, c.Seed)
	var err error
	if req.Stop, err = parseStop(c.Stop); err != nil {
		return req, err
	}
	if c.Logprobs != nil {
		if *c.Logprobs < 0 || *c.Logprobs > runner.MaxTopLogprobs {
			return req, fmt.Errorf("logprobs %d: want 0..%d", *c.Logprobs, runner.MaxTopLogprobs)
		}
		if c.Echo {
			return req, errors.New("echo with logprobs is not supported: the prompt tokens' logprobs are not computed (use one or the other)")
		}
		req.Logprobs, req.TopLogprobs = true, *c.Logprobs
	}
	req.Echo = c.Echo
	req.IgnoreEOS = c.IgnoreEOS
	if err := req.Validate(); err != nil {
		return req, err
	}
	return req, nil
}

// prompt reads OpenAI's prompt: a string, an array of token ids, or a
// one-element array of either (several prompts are refused).
func (c *completionRequest) prompt(req *runner.Request) error {
	const want = "prompt: want a string or an array of token ids"
	raw := c.Prompt
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("prompt is required")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return errors.New("prompt is empty")
		}
		req.Prompt = one
		return nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return errors.New("prompt has no tokens")
		}
		req.PromptTokens = ids
		return nil
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil {
		return errors.New(want)
	}
	if len(many) != 1 {
		return fmt.Errorf("prompt: %d prompts: only one per request is supported", len(many))
	}
	if many[0][0] == '[' || many[0][0] == '"' {
		c.Prompt = many[0]
		return c.prompt(req)
	}
	return errors.New(want)
}

// legacyLogprobs is OpenAI's legacy logprobs object (for a whole choice,
// or for the tokens of one stream chunk).
type legacyLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// add appends a token's logprobs; offset is where its text starts in the
// choice's text.
func (l *legacyLogprobs) add(lp *runner.Logprobs, offset int) {
	l.Tokens = append(l.Tokens, lp.Text)
	l.TokenLogprobs = append(l.TokenLogprobs, lp.Logprob)
	top := make(map[string]float32, len(lp.Top))
	for _, t := range lp.Top {
		if _, dup := top[t.Text]; !dup {
			top[t.Text] = t.Logprob
		}
	}
	l.TopLogprobs = append(l.TopLogprobs, top)
	l.TextOffset = append(l.TextOffset, offset)
}

func newLegacyLogprobs() *legacyLogprobs {
	return &legacyLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if s.Inference == nil {
		openAIError(w, http.StatusNotFound, "invalid_request_error", "not_found", "this node serves no models")
		return
	}
	if mt, _, _ := mimeType(r); mt != "application/json" {
		openAIError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "invalid_content_type", "want Content-Type: application/json")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_body", "read body: "+err.Error())
		return
	}
	var cr completionRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "completion body: "+err.Error())
		return
	}
	req, err := cr.toRunner()
	if err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", err.Error())
		return
	}
	instanceID, node, err := s.Inference.Route(r.Context(), cr.Model)
	if err != nil {
		inferenceError(w, err)
		return
	}
	if node != s.NodeID {
		if forwarded {
			openAIError(w, http.StatusMisdirectedRequest, "server_error", "misrouted", fmt.Sprintf("instance %s is on %s, not here", instanceID, node))
			return
		}
		s.forward(w, r, node, "/v1/completions", body)
		return
	}
	traceID := ""
	if !strings.EqualFold(r.Header.Get(TraceHeader), "off") {
		traceID = newTraceID()
		w.Header().Set(TraceIDHeader, traceID)
	}
	w.Header().Set(NodeHeader, s.NodeID)
	suffix := strings.TrimPrefix(traceID, "chat-")
	if traceID == "" {
		suffix = strings.TrimPrefix(newTraceID(), "chat-")
	}
	id := "cmpl-" + suffix
	created := time.Now().Unix()
	start := time.Now()
	choice := func(text string, lp *legacyLogprobs, finish any) map[string]any {
		c := map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}
		if lp != nil {
			c["logprobs"] = lp
		}
		return c
	}
	// offset is where the next token's text starts in the choice's text
	// (the tokens' own texts, as OpenAI counts).
	offset := 0

	if !cr.Stream {
		var text strings.Builder
		var lps *legacyLogprobs
		if req.Logprobs {
			lps = newLegacyLogprobs()
		}
		done, err := s.Inference.Complete(r.Context(), instanceID, traceID, req, func(p runner.Piece) error {
			text.WriteString(p.Text)
			if lps != nil && p.Logprobs != nil {
				lps.add(p.Logprobs, offset)
				offset += len(p.Logprobs.Text)
			}
			return nil
		})
		if err != nil {
			inferenceError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "text_completion", "created": created, "model": cr.Model,
			"choices": []any{choice(text.String(), lps, done.FinishReason)},
			"usage":   usageOf(done), "orrery": s.runExt(traceID, instanceID, start, done),
		})
		return
	}

	// Streaming: the 200 waits for the first piece, so that a request the
	// runner refuses still gets a proper status.
	flusher, _ := w.(http.Flusher)
	started := false
	chunk := func(c map[string]any, extra map[string]any) error {
		m := map[string]any{"id": id, "object": "text_completion", "created": created, "model": cr.Model, "choices": []any{c}}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	begin := func() {
		if started {
			return
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
	}
	done, err := s.Inference.Complete(r.Context(), instanceID, traceID, req, func(p runner.Piece) error {
		begin()
		var lps *legacyLogprobs
		if req.Logprobs && p.Logprobs != nil {
			lps = newLegacyLogprobs()
			lps.add(p.Logprobs, offset)
			offset += len(p.Logprobs.Text)
		}
		if p.Text == "" && lps == nil {
			return nil
		}
		return chunk(choice(p.Text, lps, nil), nil)
	})
	if err != nil {
		if !started {
			inferenceError(w, err)
			return
		}
		_, typ, code := inferenceStatus(err)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "code": code}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
		return
	}
	begin()
	chunk(choice("", nil, done.FinishReason), map[string]any{"usage": usageOf(done), "orrery": s.runExt(traceID, instanceID, start, done)})
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}
