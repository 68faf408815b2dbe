package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Anthropic's Messages API (POST /v1/messages), so that @anthropic-ai/sdk
// and the tools built on it work against any node unchanged.

// anthropicError writes Anthropic's error shape.
func anthropicError(w http.ResponseWriter, status int, _, msg string) {
	b, _ := json.Marshal(anthropicErrorBody(status, msg))
	writeRaw(w, status, b)
}

// anthropicErrorBody is Anthropic's error object for a status: an answer,
// or an error event in a stream.
func anthropicErrorBody(status int, msg string) map[string]any {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status >= 500:
		typ = "api_error"
	}
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
}

// anthropicBlock is one content block of a message.
type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result: content is a string or text blocks
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// thinking
	Thinking string `json:"thinking,omitempty"`
}

// blocksOf reads content: a string (one text block) or an array of blocks.
func blocksOf(raw json.RawMessage) ([]anthropicBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var bs []anthropicBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errors.New("content: want a string or an array of content blocks")
	}
	return bs, nil
}

// textOf joins text blocks (a tool result's or the system prompt's).
func textOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	bs, err := blocksOf(raw)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, x := range bs {
		if x.Type != "text" {
			return "", fmt.Errorf("a %s block where only text is supported", x.Type)
		}
		b.WriteString(x.Text)
	}
	return b.String(), nil
}

type anthropicRequest struct {
	Model     string          `json:"model"`
	MaxTokens *int            `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        bool            `json:"stream"`
	Tools         []anthropicTool `json:"tools"`
	ToolChoice    *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	} `json:"tool_choice"`
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	KeepAlive *KeepAlive `json:"keep_alive"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

func (a *anthropicRequest) modelID() string       { return a.Model }
func (a *anthropicRequest) keepAlive() *KeepAlive { return a.KeepAlive }
func (a *anthropicRequest) writeError(w http.ResponseWriter, status int, typ, _, msg string) {
	anthropicError(w, status, typ, msg)
}

// toRunner maps the messages: a user turn's tool_result blocks become
// tool messages (then its text a user message), an assistant turn's
// tool_use blocks its calls and thinking blocks its reasoning.
func (a *anthropicRequest) toRunner() (runnerapi.Request, error) {
	var req runnerapi.Request
	switch {
	case a.Model == "":
		return req, errors.New("model: field required")
	case a.MaxTokens == nil || *a.MaxTokens < 1:
		return req, errors.New("max_tokens: field required, at least 1")
	case len(a.Messages) == 0 || len(a.Messages) > maxMessages:
		return req, fmt.Errorf("messages: want 1..%d", maxMessages)
	}
	req.MaxTokens = *a.MaxTokens
	system, err := textOf(a.System)
	if err != nil {
		return req, fmt.Errorf("system: %v", err)
	}
	if system != "" {
		req.Messages = append(req.Messages, runnerapi.Message{Role: "system", Content: system})
	}
	for i, m := range a.Messages {
		ms, err := anthropicTurn(m.Role, m.Content)
		if err != nil {
			return req, fmt.Errorf("messages.%d.%v", i, err)
		}
		req.Messages = append(req.Messages, ms...)
	}
	req.Sample = sampleOptions(a.Temperature, a.TopP, a.TopK, nil)
	req.Stop = a.StopSequences
	if a.Thinking != nil {
		req.ChatKwargs = map[string]any{"enable_thinking": a.Thinking.Type == "enabled"}
	}
	if err := a.applyTools(&req); err != nil {
		return req, err
	}
	return req, req.Validate()
}

func anthropicTurn(role string, content json.RawMessage) ([]runnerapi.Message, error) {
	if role != "user" && role != "assistant" {
		return nil, fmt.Errorf("role: %q: want user or assistant", role)
	}
	bs, err := blocksOf(content)
	if err != nil {
		return nil, err
	}
	var out []runnerapi.Message
	turn := runnerapi.Message{Role: role}
	for j, b := range bs {
		switch {
		case b.Type == "text":
			turn.Content += b.Text
		case b.Type == "thinking" && role == "assistant":
			turn.Reasoning += b.Thinking
		case b.Type == "redacted_thinking" && role == "assistant":
		case b.Type == "tool_use" && role == "assistant":
			var obj map[string]json.RawMessage
			if !toolName.MatchString(b.Name) || json.Unmarshal(b.Input, &obj) != nil {
				return nil, fmt.Errorf("content.%d: a tool_use block needs a name and an input object", j)
			}
			turn.ToolCalls = append(turn.ToolCalls, runnerapi.ToolCall{ID: b.ID, Type: "function",
				Function: runnerapi.ToolCallFunction{Name: b.Name, Arguments: b.Input}})
		case b.Type == "tool_result" && role == "user":
			text, err := textOf(b.Content)
			if err != nil {
				return nil, fmt.Errorf("content.%d.content: %v", j, err)
			}
			if b.IsError {
				text = "Error: " + text
			}
			out = append(out, runnerapi.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: text})
		case b.Type == "image" || b.Type == "document":
			return nil, fmt.Errorf("content.%d: %s blocks are not supported: this is a text-only engine", j, b.Type)
		default:
			return nil, fmt.Errorf("content.%d: a %q block in a %s message is not supported", j, b.Type, role)
		}
	}
	if turn.Content != "" || len(turn.ToolCalls) > 0 || turn.Reasoning != "" || len(out) == 0 {
		out = append(out, turn)
	}
	return out, nil
}

// applyTools maps Anthropic's tools and tool_choice (auto, any, tool,
// none) onto OpenAI's, which the runner takes.
func (a *anthropicRequest) applyTools(req *runnerapi.Request) error {
	if len(a.Tools) == 0 {
		if a.ToolChoice != nil && a.ToolChoice.Type != "none" && a.ToolChoice.Type != "auto" {
			return errors.New("tool_choice: no tools to choose from")
		}
		return nil
	}
	var tools []map[string]any
	for i, t := range a.Tools {
		if !toolName.MatchString(t.Name) {
			return fmt.Errorf("tools.%d.name: want 1-64 letters, digits, _ or -", i)
		}
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": t.Name,
			"description": t.Description, "parameters": t.InputSchema}})
	}
	raw, _ := json.Marshal(tools)
	cr := chatRequest{Tools: raw}
	if tc := a.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto", "none":
			cr.ToolChoice, _ = json.Marshal(tc.Type)
		case "any":
			cr.ToolChoice = json.RawMessage(`"required"`)
		case "tool":
			cr.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		default:
			return fmt.Errorf("tool_choice.type %q: want auto, any, tool or none", tc.Type)
		}
		parallel := !tc.DisableParallelToolUse
		cr.ParallelToolCalls = &parallel
	}
	return cr.applyTools(req)
}
