package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// POST /v1/completions: OpenAI's legacy completions, on the same path as
// chat (routing, forwarding, tracing), with a raw prompt (a string or
// token ids) and logprobs in the legacy shape.

// completionRequest is the part of OpenAI's legacy completion request
// Orrery uses; other fields are accepted and ignored, as SDKs send many.
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	Stream bool            `json:"stream"`
	// KeepAlive (Ollama's keep_alive) is how long the instance stays
	// loaded after this request: "5m", seconds, 0 or -1 (pinned).
	KeepAlive   *KeepAlive      `json:"keep_alive"`
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
	// CachePrompt false (llama.cpp server's cache_prompt) computes the
	// whole prompt, reusing no cached prefix: for benchmarks.
	CachePrompt *bool `json:"cache_prompt"`
	// Speculative asks for speculative decoding (as chat's).
	Speculative *runnerapi.Speculation `json:"speculative"`
}

func (c *completionRequest) modelID() string { return c.Model }

func (c *completionRequest) keepAlive() *KeepAlive { return c.KeepAlive }

func (c *completionRequest) writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	openAIError(w, status, typ, code, msg)
}

// toRunner turns the request into the runner's terms.
func (c *completionRequest) toRunner() (runnerapi.Request, error) {
	var req runnerapi.Request
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
		if *c.Logprobs < 0 || *c.Logprobs > runnerapi.MaxTopLogprobs {
			return req, fmt.Errorf("logprobs %d: want 0..%d", *c.Logprobs, runnerapi.MaxTopLogprobs)
		}
		if c.Echo {
			return req, errors.New("echo with logprobs is not supported: the prompt tokens' logprobs are not computed (use one or the other)")
		}
		req.Logprobs, req.TopLogprobs = true, *c.Logprobs
	}
	req.Echo = c.Echo
	req.IgnoreEOS = c.IgnoreEOS
	req.Speculative = c.Speculative
	req.NoPromptCache = c.CachePrompt != nil && !*c.CachePrompt
	if err := req.Validate(); err != nil {
		return req, err
	}
	return req, nil
}

// prompt reads OpenAI's prompt: a string, an array of token ids, or a
// one-element array of either (several prompts are refused).
func (c *completionRequest) prompt(req *runnerapi.Request) error {
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
func (l *legacyLogprobs) add(lp *runnerapi.Logprobs, offset int) {
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
	var cr completionRequest
	c, ok := s.startCompletion(w, r, forwarded, "/v1/completions", "completion body", "cmpl-", &cr)
	if !ok {
		return
	}
	defer c.release()
	ctx, untrack := s.running.track(r.Context(), c.id)
	defer untrack()
	req := c.req
	choice := func(text string, lp *legacyLogprobs, finish any) map[string]any {
		ch := map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}
		if lp != nil {
			ch["logprobs"] = lp
		}
		return ch
	}
	// offset is where the next token's text starts in the choice's text
	// (the tokens' own texts, as OpenAI counts).
	offset := 0

	if !cr.Stream {
		if err := s.awaitLoad(ctx, nil, c.instanceID); err != nil {
			inferenceError(w, cancelled(ctx, c.id, err))
			return
		}
		var text strings.Builder
		var lps *legacyLogprobs
		if req.Logprobs {
			lps = newLegacyLogprobs()
		}
		done, err := s.Inference.Complete(ctx, c.instanceID, c.traceID, req, func(p runnerapi.Piece) error {
			text.WriteString(p.Text)
			if lps != nil && p.Logprobs != nil {
				lps.add(p.Logprobs, offset)
				offset += len(p.Logprobs.Text)
			}
			return nil
		})
		if err != nil {
			inferenceError(w, cancelled(ctx, c.id, err))
			return
		}
		writeJSON(w, http.StatusOK, c.answer("text_completion", choice(text.String(), lps, done.FinishReason),
			map[string]any{"usage": usageOf(done), "orrery": s.ext(&c, done)}))
		return
	}

	st := newEventStream(w)
	if err := s.awaitLoad(ctx, st, c.instanceID); err != nil {
		st.fail(cancelled(ctx, c.id, err))
		return
	}
	done, err := s.Inference.Complete(ctx, c.instanceID, c.traceID, req, func(p runnerapi.Piece) error {
		if err := st.begin(); err != nil {
			return err
		}
		var lps *legacyLogprobs
		if req.Logprobs && p.Logprobs != nil {
			lps = newLegacyLogprobs()
			lps.add(p.Logprobs, offset)
			offset += len(p.Logprobs.Text)
		}
		if p.Text == "" && lps == nil {
			return nil
		}
		return st.send(c.answer("text_completion", choice(p.Text, lps, nil), nil))
	})
	if err != nil {
		st.fail(cancelled(ctx, c.id, err))
		return
	}
	st.begin()
	st.send(c.answer("text_completion", choice("", nil, done.FinishReason), map[string]any{"usage": usageOf(done), "orrery": s.ext(&c, done)}))
	st.done()
}
