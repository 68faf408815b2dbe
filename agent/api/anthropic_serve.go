package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request, forwarded bool) {
	var body anthropicRequest
	c, ok := s.startCompletion(w, r, forwarded, "/v1/messages", "messages body", "msg_", &body)
	if !ok {
		return
	}
	defer c.release()
	ctx, untrack := s.running.track(r.Context(), c.id)
	defer untrack()
	if err := s.awaitLoad(ctx, nil, c.instanceID); err != nil {
		writeRunError(w, &body, cancelled(ctx, c.id, err))
		return
	}
	if body.Stream {
		s.anthropicStream(ctx, w, &c, &body)
		return
	}
	var blocks []map[string]any
	add := func(typ, key, text string) {
		if n := len(blocks); n > 0 && blocks[n-1]["type"] == typ && typ != "tool_use" {
			blocks[n-1][key] = blocks[n-1][key].(string) + text
			return
		}
		b := map[string]any{"type": typ, key: text}
		if typ == "thinking" {
			b["signature"] = ""
		}
		blocks = append(blocks, b)
	}
	called := false
	done, err := s.Inference.Complete(ctx, c.instanceID, c.traceID, c.req, func(p runnerapi.Piece) error {
		if p.Reasoning != "" {
			add("thinking", "thinking", p.Reasoning)
		}
		if p.Text != "" {
			add("text", "text", p.Text)
		}
		for _, call := range p.Calls {
			called = true
			blocks = append(blocks, anthropicToolUse(c.id, call))
		}
		return nil
	})
	if err != nil {
		writeRunError(w, &body, cancelled(ctx, c.id, err))
		return
	}
	if blocks == nil {
		blocks = []map[string]any{}
	}
	msg := anthropicMessage(&c, blocks)
	msg["stop_reason"] = anthropicStop(done, called)
	msg["usage"] = anthropicUsage(done)
	msg["orrery"] = s.ext(&c, done)
	writeJSON(w, http.StatusOK, msg)
}

func anthropicMessage(c *completionRun, content []map[string]any) map[string]any {
	return map[string]any{"id": c.id, "type": "message", "role": "assistant", "model": c.model, "content": content,
		"stop_reason": nil, "stop_sequence": nil}
}

func anthropicToolUse(completionID string, call runnerapi.Call) map[string]any {
	return map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%s_%d", completionID, call.Index), "name": call.Name,
		"input": json.RawMessage(call.Arguments)}
}

// anthropicStop is the stop_reason: tool_use, max_tokens or end_turn (a
// stop sequence is reported as end_turn: the runner does not tell them
// apart).
func anthropicStop(d *runnerapi.Done, called bool) string {
	switch {
	case called && d.FinishReason == "stop":
		return "tool_use"
	case d.FinishReason == "length":
		return "max_tokens"
	}
	return "end_turn"
}

func anthropicUsage(d *runnerapi.Done) map[string]any {
	return map[string]any{"input_tokens": d.PromptTokens, "output_tokens": d.CompletionTokens,
		"cache_read_input_tokens": d.CachedTokens, "cache_creation_input_tokens": 0}
}

// anthropicEvents writes Anthropic's event stream (named events); the
// 200 goes out with message_start.
type anthropicEvents struct {
	w       http.ResponseWriter
	started bool
	open    string // type of the content block open, "" for none
	index   int    // of the next block
}

func (e *anthropicEvents) send(event string, v map[string]any) error {
	if !e.started {
		e.started = true
		h := e.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		e.w.WriteHeader(http.StatusOK)
	}
	v["type"] = event
	b, _ := json.Marshal(v)
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// block makes typ the open block (closing another), then sends delta.
func (e *anthropicEvents) block(typ string, start, delta map[string]any) error {
	if e.open != typ || typ == "tool_use" {
		if err := e.close(); err != nil {
			return err
		}
		e.open = typ
		if err := e.send("content_block_start", map[string]any{"index": e.index, "content_block": start}); err != nil {
			return err
		}
	}
	return e.send("content_block_delta", map[string]any{"index": e.index, "delta": delta})
}

func (e *anthropicEvents) close() error {
	if e.open == "" {
		return nil
	}
	e.open = ""
	e.index++
	return e.send("content_block_stop", map[string]any{"index": e.index - 1})
}

func (s *Server) anthropicStream(ctx context.Context, w http.ResponseWriter, c *completionRun, body *anthropicRequest) {
	ev := &anthropicEvents{w: w}
	start := func() error {
		if ev.started {
			return nil
		}
		msg := anthropicMessage(c, []map[string]any{})
		msg["usage"] = map[string]any{"input_tokens": 0, "output_tokens": 0}
		return ev.send("message_start", map[string]any{"message": msg})
	}
	called := false
	done, err := s.Inference.Complete(ctx, c.instanceID, c.traceID, c.req, func(p runnerapi.Piece) error {
		if err := start(); err != nil {
			return err
		}
		if p.Reasoning != "" {
			if err := ev.block("thinking", map[string]any{"type": "thinking", "thinking": "", "signature": ""},
				map[string]any{"type": "thinking_delta", "thinking": p.Reasoning}); err != nil {
				return err
			}
		}
		if p.Text != "" {
			if err := ev.block("text", map[string]any{"type": "text", "text": ""}, map[string]any{"type": "text_delta", "text": p.Text}); err != nil {
				return err
			}
		}
		for _, call := range p.Calls {
			called = true
			head := anthropicToolUse(c.id, call)
			head["input"] = map[string]any{}
			if err := ev.block("tool_use", head, map[string]any{"type": "input_json_delta", "partial_json": call.Arguments}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		err = cancelled(ctx, c.id, err)
		if !ev.started {
			writeRunError(w, body, err)
			return
		}
		status, _, _ := inferenceStatus(err)
		ev.send("error", anthropicErrorBody(status, err.Error()))
		return
	}
	if start() != nil || ev.close() != nil {
		return
	}
	ev.send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": anthropicStop(done, called), "stop_sequence": nil},
		"usage": anthropicUsage(done), "orrery": s.ext(c, done)}) // message_start went out before the prompt was counted
	ev.send("message_stop", map[string]any{})
}
