package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
)

// Headers of the inference API.
const (
	// TraceIDHeader names the trace a completion left.
	TraceIDHeader = "X-Orrery-Trace-Id"
	// TraceHeader "off" runs a completion untraced (to measure tracing).
	TraceHeader = "X-Orrery-Trace"
	// NodeHeader names the node that served a completion.
	NodeHeader = "X-Orrery-Node"
)

// maxMessages bounds a chat request's messages.
const maxMessages = 1024

// chatRequest is the part of OpenAI's chat completion request Orrery
// uses; other fields are accepted and ignored, as SDKs send many.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Stream   bool          `json:"stream"`
	// KeepAlive (Ollama's keep_alive) is how long the instance stays
	// loaded after this request: "5m", seconds, 0 or -1 (pinned).
	KeepAlive           *KeepAlive      `json:"keep_alive"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	// IgnoreEOS (as in vLLM) generates past end-of-generation tokens, up
	// to max_tokens: for benchmarks and tests that need a fixed length.
	IgnoreEOS bool `json:"ignore_eos"`
	// CachePrompt false (llama.cpp server's cache_prompt) computes the
	// whole prompt, reusing no cached prefix: for benchmarks.
	CachePrompt *bool `json:"cache_prompt"`
	// Speculative asks for speculative decoding: {"draft": "ngram",
	// "max": K}.
	Speculative *runnerapi.Speculation `json:"speculative"`
	// Logprobs and TopLogprobs (0..runner.MaxTopLogprobs) ask for each
	// generated token's logprob and the most likely alternatives.
	Logprobs    bool `json:"logprobs"`
	TopLogprobs *int `json:"top_logprobs"`
	// ResponseFormat asks for JSON (format.go).
	ResponseFormat *responseFormat `json:"response_format"`
	// Tools, ToolChoice and ParallelToolCalls are OpenAI's (tools.go).
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	// Template arguments: llama.cpp's chat_template_kwargs, and
	// reasoning_effort and enable_thinking.
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
	ReasoningEffort    string         `json:"reasoning_effort"`
	EnableThinking     *bool          `json:"enable_thinking"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// An assistant's calls, and which call a tool message answers.
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Name       string         `json:"name,omitempty"`
}

// text is a message's content: a string, or an array of parts whose text
// parts are joined (other part types are refused).
func (m chatMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		if m.Role == "assistant" {
			return "", nil // an assistant turn of calls only
		}
		return "", errors.New("content is required")
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", errors.New("content: want a string or an array of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part of type %q: only text is supported", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// toRunner turns the request into the runner's terms, with OpenAI's
// defaults (temperature 1, top_p 1) and a random seed when none is given.
func (c *chatRequest) modelID() string { return c.Model }

func (c *chatRequest) keepAlive() *KeepAlive { return c.KeepAlive }

func (c *chatRequest) writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	openAIError(w, status, typ, code, msg)
}

func (c *chatRequest) toRunner() (runnerapi.Request, error) {
	var req runnerapi.Request
	if c.Model == "" {
		return req, errors.New("model is required")
	}
	if len(c.Messages) == 0 || len(c.Messages) > maxMessages {
		return req, fmt.Errorf("messages: want 1..%d, got %d", maxMessages, len(c.Messages))
	}
	if c.N != nil && *c.N != 1 {
		return req, fmt.Errorf("n = %d: only 1 is supported", *c.N)
	}
	for i, m := range c.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return req, fmt.Errorf("messages[%d].role %q: want system, user, assistant or tool", i, m.Role)
		}
		t, err := m.text()
		if err != nil {
			return req, fmt.Errorf("messages[%d].%v", i, err)
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		msg := runnerapi.Message{Role: role, Content: t}
		if err := m.toolFields(&msg); err != nil {
			return req, fmt.Errorf("messages[%d].%v", i, err)
		}
		req.Messages = append(req.Messages, msg)
	}
	switch {
	case c.MaxCompletionTokens != nil:
		req.MaxTokens = *c.MaxCompletionTokens
	case c.MaxTokens != nil:
		req.MaxTokens = *c.MaxTokens
	}
	if req.MaxTokens < 0 {
		return req, fmt.Errorf("max_tokens %d: want ≥ 0", req.MaxTokens)
	}
	req.Sample = sampleOptions(c.Temperature, c.TopP, c.TopK, c.Seed)
	var err error
	if req.Stop, err = parseStop(c.Stop); err != nil {
		return req, err
	}
	req.IgnoreEOS = c.IgnoreEOS
	req.NoPromptCache = c.CachePrompt != nil && !*c.CachePrompt
	req.Speculative = c.Speculative
	req.Logprobs = c.Logprobs
	if c.TopLogprobs != nil {
		if !c.Logprobs {
			return req, errors.New("top_logprobs needs logprobs: true")
		}
		req.TopLogprobs = *c.TopLogprobs
	}
	if req.Grammar, err = c.ResponseFormat.grammar(); err != nil {
		return req, err
	}
	if err := c.applyTools(&req); err != nil {
		return req, err
	}
	req.ChatKwargs = c.chatKwargs()
	if err := req.Validate(); err != nil {
		return req, err
	}
	return req, nil
}

// sampleOptions are OpenAI's defaults (temperature 1, top_p 1) with the
// request's overrides, and a random seed when none is given.
func sampleOptions(temperature, topP *float64, topK *int, seed *int64) sample.Options {
	o := sample.Options{Temperature: 1, TopP: 1}
	if temperature != nil {
		o.Temperature = *temperature
	}
	if topP != nil {
		o.TopP = *topP
	}
	if topK != nil {
		o.TopK = *topK
	}
	if seed != nil {
		o.Seed = uint64(*seed)
	} else {
		var b [8]byte
		rand.Read(b[:])
		for _, x := range b {
			o.Seed = o.Seed<<8 | uint64(x)
		}
	}
	return o
}

// parseStop reads OpenAI's stop: absent, null, a string or an array.
func parseStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("stop: want a string or an array of strings")
	}
	return many, nil
}

// chatLogprob is one token of OpenAI's chat logprobs.content.
type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func chatLogprobOf(lp *runnerapi.Logprobs) chatLogprob {
	c := chatLogprob{Token: lp.Text, Logprob: lp.Logprob, Bytes: bytesOf(lp.Text), TopLogprobs: []chatTopLogprob{}}
	for _, t := range lp.Top {
		c.TopLogprobs = append(c.TopLogprobs, chatTopLogprob{Token: t.Text, Logprob: t.Logprob, Bytes: bytesOf(t.Text)})
	}
	return c
}

func bytesOf(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// openAIError writes OpenAI's error shape.
func openAIError(w http.ResponseWriter, status int, typ, code, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
	writeRaw(w, status, b)
}

func inferenceError(w http.ResponseWriter, err error) {
	status, typ, code := inferenceStatus(err)
	openAIError(w, status, typ, code, err.Error())
}

// newTraceID names a request's trace: chat-<unix ms>-<random>.
func newTraceID() string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("chat-%d-%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// usage is OpenAI's usage object, with the cached part of the prompt.
type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails promptDetails `json:"prompt_tokens_details"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// orreryExt is the "orrery" extension object next to usage: where the
// request ran, its trace and timings.
type orreryExt struct {
	TraceID        string  `json:"traceId,omitempty"`
	Node           string  `json:"node"`
	InstanceID     string  `json:"instanceId"`
	PrefillTokPerS float64 `json:"prefillTokPerSec"`
	DecodeTokPerS  float64 `json:"decodeTokPerSec"`
	TimeToFirstMs  float64 `json:"timeToFirstTokenMs"`
	QueueMs        float64 `json:"queueMs"`
	// CachedTokens of the prompt came from the prefix cache.
	CachedTokens int     `json:"cachedTokens"`
	DurationMs   float64 `json:"durationMs"`
	FinishReason string  `json:"finishReason"`
	// EnergyJ and AvgPowerW are the energy the request's nodes drew over
	// its duration (system power, integrated) and its mean; null where a
	// node's power is not known, never 0.
	EnergyJ   *float64 `json:"energyJ"`
	AvgPowerW *float64 `json:"avgPowerW"`
	DurationS float64  `json:"durationS"`
	// DraftTokens were drafted by speculative decoding, of which
	// AcceptedDraftTokens were accepted (absent without speculation).
	DraftTokens         int `json:"draftTokens,omitempty"`
	AcceptedDraftTokens int `json:"acceptedDraftTokens,omitempty"`
}

// requestEnergy integrates the system power of every node of the instance
// over [start, end]: the energy of the request, and its mean power. Both
// are nil unless every node's power is known over the window.
func (s *Server) requestEnergy(instanceID string, start, end time.Time) (j, w *float64) {
	var nodes []string
	for _, r := range s.Store.State().Instances[instanceID].Ranks {
		nodes = append(nodes, r.NodeID)
	}
	joules, watts, ok := state.NodesEnergy(nodes, s.Store.System().Power, start, end)
	if !ok {
		return nil, nil
	}
	joules, watts = round3(joules), round3(watts)
	return &joules, &watts
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// runExt is the "orrery" object of a completion that started at start
// and just ended with d; it records the request's metrics.
func (s *Server) runExt(traceID, instanceID string, start time.Time, d *runnerapi.Done) orreryExt {
	end := time.Now()
	e := orreryExt{TraceID: traceID, Node: s.NodeID, InstanceID: instanceID,
		PrefillTokPerS: round3(d.PrefillTokPerSec()), DecodeTokPerS: round3(d.DecodeTokPerSec()),
		TimeToFirstMs: round3(float64(d.FirstTokenNs) / 1e6), QueueMs: round3(float64(d.QueueNs) / 1e6),
		DurationMs: round3(float64(end.Sub(start).Microseconds()) / 1e3), FinishReason: d.FinishReason,
		DurationS: round3(end.Sub(start).Seconds()), CachedTokens: d.CachedTokens,
		DraftTokens: d.DraftTokens, AcceptedDraftTokens: d.AcceptedDraftTokens}
	e.EnergyJ, e.AvgPowerW = s.requestEnergy(instanceID, start, end)
	if s.Metrics != nil {
		s.Metrics.ObserveRequest(end.Sub(start), d.PromptTokens, d.CachedTokens, d.PrefillTokPerSec(), d.DecodeTokPerSec())
		s.Metrics.ObserveDrafts(d.DraftTokens, d.AcceptedDraftTokens)
	}
	return e
}

func usageOf(d *runnerapi.Done) usage {
	return usage{PromptTokens: d.PromptTokens, CompletionTokens: d.CompletionTokens, TotalTokens: d.PromptTokens + d.CompletionTokens,
		PromptTokensDetails: promptDetails{CachedTokens: d.CachedTokens}}
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, forwarded bool) {
	var cr chatRequest
	c, ok := s.startCompletion(w, r, forwarded, "/v1/chat/completions", "chat completion body", "chatcmpl-", &cr)
	if !ok {
		return
	}
	defer c.release()
	ctx, untrack := s.running.track(r.Context(), c.id)
	defer untrack()
	if !cr.Stream {
		s.chatOnce(ctx, w, &c)
		return
	}
	s.chatStream(ctx, w, &c)
}

// chatOnce answers a chat completion in one response.
func (s *Server) chatOnce(ctx context.Context, w http.ResponseWriter, c *completionRun) {
	req := c.req
	if err := s.awaitLoad(ctx, nil, c.instanceID); err != nil {
		inferenceError(w, cancelled(ctx, c.id, err))
		return
	}
	var text, reasoning strings.Builder
	var lps []chatLogprob
	var calls []any
	done, err := s.Inference.Complete(ctx, c.instanceID, c.traceID, req, func(p runnerapi.Piece) error {
		text.WriteString(p.Text)
		reasoning.WriteString(p.Reasoning)
		for _, call := range p.Calls {
			calls = append(calls, openAICall(c.id, call))
		}
		if req.Logprobs && p.Logprobs != nil {
			lps = append(lps, chatLogprobOf(p.Logprobs))
		}
		return nil
	})
	if err != nil {
		inferenceError(w, cancelled(ctx, c.id, err))
		return
	}
	msg := map[string]any{"role": "assistant", "content": text.String()}
	if reasoning.Len() > 0 {
		msg["reasoning_content"] = reasoning.String()
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
		if text.Len() == 0 {
			msg["content"] = nil // as OpenAI answers a call
		}
	}
	choice := map[string]any{"index": 0, "finish_reason": finishReason(done, len(calls) > 0), "message": msg}
	if req.Logprobs {
		if lps == nil {
			lps = []chatLogprob{}
		}
		choice["logprobs"] = map[string]any{"content": lps}
	}
	writeJSON(w, http.StatusOK, c.answer("chat.completion", choice, map[string]any{"usage": usageOf(done), "orrery": s.ext(c, done)}))
}

// chatStream streams a chat completion: the first chunk (the assistant's
// role) waits for the first token.
func (s *Server) chatStream(ctx context.Context, w http.ResponseWriter, c *completionRun) {
	req := c.req
	st := newEventStream(w)
	chunk := func(delta map[string]any, finish any, extra map[string]any, lp ...chatLogprob) error {
		choice := map[string]any{"index": 0, "delta": delta, "finish_reason": finish}
		if lp != nil {
			choice["logprobs"] = map[string]any{"content": lp}
		}
		return st.send(c.answer("chat.completion.chunk", choice, extra))
	}
	st.first = func() error { return chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil) }
	if err := s.awaitLoad(ctx, st, c.instanceID); err != nil {
		st.fail(cancelled(ctx, c.id, err))
		return
	}
	called := false
	done, err := s.Inference.Complete(ctx, c.instanceID, c.traceID, req, func(p runnerapi.Piece) error {
		if err := st.begin(); err != nil {
			return err
		}
		if p.Reasoning != "" {
			if err := chunk(map[string]any{"reasoning_content": p.Reasoning}, nil, nil); err != nil {
				return err
			}
		}
		for _, call := range p.Calls {
			called = true
			for _, d := range toolCallDeltas(c.id, call) {
				if err := chunk(d, nil, nil); err != nil {
					return err
				}
			}
		}
		if req.Logprobs && p.Logprobs != nil {
			return chunk(map[string]any{"content": p.Text}, nil, nil, chatLogprobOf(p.Logprobs))
		}
		if p.Text == "" {
			return nil
		}
		return chunk(map[string]any{"content": p.Text}, nil, nil)
	})
	if err != nil {
		st.fail(cancelled(ctx, c.id, err))
		return
	}
	if err := st.begin(); err != nil {
		return
	}
	chunk(map[string]any{}, finishReason(done, called), map[string]any{"usage": usageOf(done), "orrery": s.ext(c, done)})
	st.done()
}

func mimeType(r *http.Request) (string, map[string]string, error) {
	return mime.ParseMediaType(r.Header.Get("Content-Type"))
}

// forward relays the request to node's peer API and its answer back,
// flushing as bytes arrive so that a stream stays a stream. If the stream
// breaks, an SSE answer gets an error event.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, node, path string, body []byte) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+node+path, bytes.NewReader(body))
	if err != nil {
		openAIError(w, http.StatusInternalServerError, "server_error", "forward", err.Error())
		return
	}
	for _, h := range []string{"Content-Type", "Accept", TraceHeader} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := s.Inference.Peer().Do(req)
	if err != nil {
		openAIError(w, http.StatusBadGateway, "server_error", "node_unreachable", fmt.Sprintf("forward to node %s: %v", node, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Cache-Control", TraceIDHeader, NodeHeader} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
				b, _ := json.Marshal(map[string]any{"error": fmt.Sprintf("node %s broke off: %v", node, err)})
				fmt.Fprintf(w, "\n%s\n", b)
			}
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": fmt.Sprintf("node %s broke off: %v", node, err),
					"type": "server_error", "code": "node_unreachable"}})
				fmt.Fprintf(w, "\n\ndata: %s\n\n", b)
				if flusher != nil {
					flusher.Flush()
				}
			}
			return
		}
	}
}

// models lists every model in the cluster: those running, and those on
// some node's disk that could be placed.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	st := s.Store.State()
	byID := map[string]*ModelEntry{}
	get := func(id string) *ModelEntry {
		e := byID[id]
		if e == nil {
			e = &ModelEntry{ID: id, Object: "model", OwnedBy: "orrery",
				Orrery: ModelInfo{Instances: []string{}, Nodes: []string{}}}
			byID[id] = e
		}
		return e
	}
	for node, nm := range st.NodeModels {
		for _, m := range nm.Models {
			if m.Error != "" {
				continue
			}
			e := get(m.ID)
			e.Orrery.Nodes = append(e.Orrery.Nodes, node)
			e.Orrery.Arch, e.Orrery.Layers, e.Orrery.Quantization, e.Orrery.Size = m.Arch, m.Layers, m.Quantization, m.Size
		}
	}
	for _, in := range st.Instances {
		e := get(in.ModelID)
		e.Orrery.Running = true
		e.Orrery.Instances = append(e.Orrery.Instances, in.InstanceID)
		if c := in.CreatedAt.Unix(); e.Created == 0 || c < e.Created {
			e.Created = c
		}
		if in.Status == state.InstanceStatusFailed {
			continue
		}
		e.Orrery.Pinned = e.Orrery.Pinned || in.Pinned
		e.Orrery.Active += in.Active
		if x := in.ExpiresAt; x != nil && (e.Orrery.ExpiresAt == nil || x.After(*e.Orrery.ExpiresAt)) {
			e.Orrery.ExpiresAt = x
		}
	}
	for _, e := range byID {
		if e.Orrery.Pinned || e.Orrery.Active > 0 {
			e.Orrery.ExpiresAt = nil
		}
	}
	out := make([]ModelEntry, 0, len(byID))
	for _, e := range byID {
		sort.Strings(e.Orrery.Nodes)
		slices.Sort(e.Orrery.Instances)
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b ModelEntry) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, ModelList{Object: "list", Data: out})
}
