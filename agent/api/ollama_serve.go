package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request, forwarded bool) {
	var body ollamaChatRequest
	c, ok := s.startCompletion(w, r, forwarded, "/api/chat", "chat body", "chat-", &body)
	if !ok {
		return
	}
	defer c.release()
	ctx, untrack := s.running.track(r.Context(), c.id)
	defer untrack()
	s.ollamaRun(ctx, w, &c, &body.ollamaCommon, true)
}

func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if !requireJSON(w, r, "generate") { // before a load-only request can place a model (Ollama's error shape is this one)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		ollamaError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var peek ollamaGenerateRequest
	if json.Unmarshal(raw, &peek) == nil && peek.Prompt == "" && len(peek.Images) == 0 {
		s.ollamaLoad(w, r, forwarded, &peek, raw)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	var body ollamaGenerateRequest
	c, ok := s.startCompletion(w, r, forwarded, "/api/generate", "generate body", "gen-", &body)
	if !ok {
		return
	}
	defer c.release()
	ctx, untrack := s.running.track(r.Context(), c.id)
	defer untrack()
	s.ollamaRun(ctx, w, &c, &body.ollamaCommon, false)
}

// ollamaLoad answers a generate request without a prompt as Ollama does:
// the model is loaded (placed if need be), and its keep_alive applied, so
// that keep_alive 0 unloads it.
func (s *Server) ollamaLoad(w http.ResponseWriter, r *http.Request, forwarded bool, body *ollamaGenerateRequest, raw []byte) {
	if s.Inference == nil {
		ollamaError(w, http.StatusNotFound, "this node serves no models")
		return
	}
	if body.Model == "" {
		ollamaError(w, http.StatusBadRequest, "model is required")
		return
	}
	instanceID, node, err := s.Inference.Route(r.Context(), body.Model, body.KeepAlive)
	if err != nil {
		writeRunError(w, body, err)
		return
	}
	if node != s.NodeID && !forwarded {
		s.forward(w, r, node, "/api/generate", raw)
		return
	}
	if err := s.awaitLoad(r.Context(), nil, instanceID); err != nil {
		writeRunError(w, body, err)
		return
	}
	release, err := s.Inference.Hold(instanceID, body.KeepAlive)
	if err != nil {
		writeRunError(w, body, err)
		return
	}
	release()
	reason := "load"
	if ka := body.KeepAlive; ka != nil && ka.D == 0 {
		reason = "unload"
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": body.Model, "created_at": ollamaNow(), "response": "", "done": true, "done_reason": reason})
}

func ollamaNow() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// ollamaLines writes an NDJSON answer; the 200 goes out with the first
// line, so that a request refused before any output gets its status.
type ollamaLines struct {
	w       http.ResponseWriter
	started bool
}

func (o *ollamaLines) send(v any) error {
	if !o.started {
		o.started = true
		o.w.Header().Set("Content-Type", "application/x-ndjson")
		o.w.WriteHeader(http.StatusOK)
	}
	b, _ := json.Marshal(v)
	if _, err := o.w.Write(append(b, '\n')); err != nil {
		return err
	}
	if f, ok := o.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// fail reports err: as a status before any line, else as an error line.
func (o *ollamaLines) fail(err error) {
	if !o.started {
		status, _, _ := inferenceStatus(err)
		ollamaError(o.w, status, err.Error())
		return
	}
	o.send(map[string]string{"error": err.Error()})
}

// ollamaCalls are parsed calls in Ollama's shape: arguments as objects.
func ollamaCalls(calls []runnerapi.Call) []any {
	out := make([]any, len(calls))
	for i, c := range calls {
		out[i] = map[string]any{"function": map[string]any{"index": c.Index, "name": c.Name, "arguments": json.RawMessage(c.Arguments)}}
	}
	return out
}

// ollamaRun runs a chat (message) or generate (response) request and
// answers in Ollama's shape: NDJSON lines, or one object with stream
// false; the last says done, why, and the counts and durations (ns).
func (s *Server) ollamaRun(ctx context.Context, w http.ResponseWriter, c *completionRun, common *ollamaCommon, chat bool) {
	out := &ollamaLines{w: w}
	loadStart := time.Now()
	if err := s.awaitLoad(ctx, nil, c.instanceID); err != nil {
		out.fail(cancelled(ctx, c.id, err))
		return
	}
	loadNs := time.Since(loadStart).Nanoseconds()
	stream := common.streams()
	var text, thinking strings.Builder
	var calls []any
	line := func(content, reasoning string, tc []any) map[string]any {
		m := map[string]any{"model": c.model, "created_at": ollamaNow(), "done": false}
		if chat {
			msg := map[string]any{"role": "assistant", "content": content}
			if reasoning != "" {
				msg["thinking"] = reasoning
			}
			if len(tc) > 0 {
				msg["tool_calls"] = tc
			}
			m["message"] = msg
		} else {
			m["response"] = content
			if reasoning != "" {
				m["thinking"] = reasoning
			}
		}
		return m
	}
	done, err := s.Inference.Complete(ctx, c.instanceID, c.traceID, c.req, func(p runnerapi.Piece) error {
		if !stream {
			text.WriteString(p.Text)
			thinking.WriteString(p.Reasoning)
			calls = append(calls, ollamaCalls(p.Calls)...)
			return nil
		}
		if p.Text == "" && p.Reasoning == "" && len(p.Calls) == 0 {
			return nil
		}
		return out.send(line(p.Text, p.Reasoning, ollamaCalls(p.Calls)))
	})
	if err != nil {
		out.fail(cancelled(ctx, c.id, err))
		return
	}
	last := line(text.String(), thinking.String(), calls)
	last["done"], last["done_reason"] = true, done.FinishReason
	last["total_duration"] = time.Since(c.start).Nanoseconds()
	last["load_duration"] = loadNs
	last["prompt_eval_count"], last["prompt_eval_duration"] = done.PromptTokens, done.PrefillNs
	last["eval_count"], last["eval_duration"] = done.CompletionTokens, done.DecodeNs
	last["orrery"] = s.ext(c, done)
	if !stream {
		writeJSON(w, http.StatusOK, last)
		return
	}
	out.send(last)
}

// ollamaModels is /api/tags: the models some node has, in Ollama's shape.
func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"models": s.ollamaList(false)})
}

// ollamaPS is /api/ps: the models running, with when they unload.
func (s *Server) ollamaPS(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"models": s.ollamaList(true)})
}

// ollamaVersion is the Ollama API version Orrery follows.
const ollamaVersion = "0.17.4"

func (s *Server) ollamaVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": ollamaVersion})
}

func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	if !requireJSON(w, r, "show") {
		return
	}
	var body ollamaModelRef
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		ollamaError(w, http.StatusBadRequest, "show body: "+err.Error())
		return
	}
	id := body.ref()
	for _, m := range s.ollamaList(false) {
		if m["name"] != id {
			continue
		}
		d := m["details"].(map[string]any)
		info := map[string]any{"general.architecture": d["family"]}
		caps := []string{"completion"}
		if s.notEmbedding(id) == nil { // as Ollama lists an embedding model
			caps = []string{"embedding"}
		}
		writeJSON(w, http.StatusOK, map[string]any{"license": "", "modelfile": "", "parameters": "", "template": "",
			"details": d, "model_info": info, "capabilities": caps, "modified_at": m["modified_at"]})
		return
	}
	ollamaError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", id))
}
