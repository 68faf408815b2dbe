package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
)

// Ollama's API (/api/chat, /api/generate and the model lists), so that
// Ollama's clients work against any node unchanged. Answers stream as
// NDJSON by default, as Ollama's do; errors are {"error": "…"}.

// ollamaError writes Ollama's error shape.
func ollamaError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	writeRaw(w, status, b)
}

// ollamaOptions are the model options Orrery uses; others (num_ctx,
// num_gpu, …) are accepted and ignored.
type ollamaOptions struct {
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
	TopK        *int     `json:"top_k"`
	Seed        *int64   `json:"seed"`
	NumPredict  *int     `json:"num_predict"`
	Stop        []string `json:"stop"`
}

// ollamaCommon is what /api/chat and /api/generate share.
type ollamaCommon struct {
	Model     string          `json:"model"`
	Format    json.RawMessage `json:"format"`
	Options   *ollamaOptions  `json:"options"`
	Stream    *bool           `json:"stream"`
	KeepAlive *KeepAlive      `json:"keep_alive"`
	// Think is true, false, or an effort ("low", "medium", "high").
	Think json.RawMessage `json:"think"`
}

func (c *ollamaCommon) modelID() string       { return c.Model }
func (c *ollamaCommon) keepAlive() *KeepAlive { return c.KeepAlive }
func (c *ollamaCommon) streams() bool         { return c.Stream == nil || *c.Stream }

func (c *ollamaCommon) writeError(w http.ResponseWriter, status int, _, _, msg string) {
	ollamaError(w, status, msg)
}

// apply puts the options, format and think into req, with Ollama's
// defaults (temperature 0.8, top_k 40, top_p 0.9).
func (c *ollamaCommon) apply(req *runnerapi.Request) error {
	if c.Model == "" {
		return errors.New("model is required")
	}
	req.Sample = sample.Options{Temperature: 0.8, TopK: 40, TopP: 0.9, Seed: sampleOptions(nil, nil, nil, nil).Seed}
	if o := c.Options; o != nil {
		if o.Temperature != nil {
			req.Sample.Temperature = *o.Temperature
		}
		if o.TopP != nil {
			req.Sample.TopP = *o.TopP
		}
		if o.TopK != nil {
			req.Sample.TopK = *o.TopK
		}
		if o.Seed != nil {
			req.Sample.Seed = uint64(*o.Seed)
		}
		if o.NumPredict != nil && *o.NumPredict > 0 { // -1 and -2: as long as the default allows
			req.MaxTokens = *o.NumPredict
		}
		req.Stop = o.Stop
	}
	var err error
	if req.Grammar, err = ollamaFormat(c.Format); err != nil {
		return err
	}
	if len(c.Think) > 0 && string(c.Think) != "null" {
		var on bool
		var effort string
		switch {
		case json.Unmarshal(c.Think, &on) == nil:
			req.ChatKwargs = map[string]any{"enable_thinking": on}
		case json.Unmarshal(c.Think, &effort) == nil && (effort == "low" || effort == "medium" || effort == "high"):
			req.ChatKwargs = map[string]any{"enable_thinking": true, "reasoning_effort": effort}
		default:
			return errors.New(`think: want true, false, "low", "medium" or "high"`)
		}
	}
	return req.Validate()
}

// ollamaFormat is Ollama's format: "json" or a JSON Schema, enforced by
// the grammar as response_format is.
func ollamaFormat(raw json.RawMessage) (*grammar.Spec, error) {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `""` {
		return nil, nil
	}
	schema := raw
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "json" {
			return nil, fmt.Errorf(`format %q: want "json" or a JSON Schema object`, s)
		}
		schema = json.RawMessage(`{"type":"object"}`)
	}
	return schemaSpec(schema, "format")
}

// ollamaMessage is one message of /api/chat.
type ollamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Images    []string         `json:"images,omitempty"`
	Thinking  string           `json:"thinking,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
	ToolName  string           `json:"tool_name,omitempty"`
}

// ollamaToolCall is a call as Ollama writes it: the arguments an object.
type ollamaToolCall struct {
	Function struct {
		Index     *int            `json:"index,omitempty"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type ollamaChatRequest struct {
	ollamaCommon
	Messages []ollamaMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
}

func (c *ollamaChatRequest) toRunner() (runnerapi.Request, error) {
	var req runnerapi.Request
	if len(c.Messages) == 0 || len(c.Messages) > maxMessages {
		return req, fmt.Errorf("messages: want 1..%d, got %d", maxMessages, len(c.Messages))
	}
	for i, m := range c.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return req, fmt.Errorf("messages[%d].role %q: want system, user, assistant or tool", i, m.Role)
		}
		if len(m.Images) > 0 {
			return req, fmt.Errorf("messages[%d].images: this model takes text only", i)
		}
		msg := runnerapi.Message{Role: m.Role, Content: m.Content, Reasoning: m.Thinking, Name: m.ToolName}
		for j, tc := range m.ToolCalls {
			args := tc.Function.Arguments
			var obj map[string]json.RawMessage
			if len(args) == 0 {
				args = json.RawMessage("{}")
			} else if json.Unmarshal(args, &obj) != nil {
				return req, fmt.Errorf("messages[%d].tool_calls[%d].function.arguments: want a JSON object", i, j)
			}
			if m.Role != "assistant" || !toolName.MatchString(tc.Function.Name) {
				return req, fmt.Errorf("messages[%d].tool_calls[%d]: want an assistant's call of a named function", i, j)
			}
			msg.ToolCalls = append(msg.ToolCalls, runnerapi.ToolCall{Type: "function",
				Function: runnerapi.ToolCallFunction{Name: tc.Function.Name, Arguments: args}})
		}
		req.Messages = append(req.Messages, msg)
	}
	if len(c.Tools) > 0 && string(c.Tools) != "null" {
		// Ollama's tools are OpenAI's; the model decides (no tool_choice).
		cr := chatRequest{Tools: c.Tools}
		if err := cr.applyTools(&req); err != nil {
			return req, err
		}
	}
	return req, c.apply(&req)
}

type ollamaGenerateRequest struct {
	ollamaCommon
	Prompt string   `json:"prompt"`
	System string   `json:"system"`
	Raw    bool     `json:"raw"`
	Suffix string   `json:"suffix"`
	Images []string `json:"images"`
}

// toRunner renders the prompt with the chat template (a user message, and
// the system one), or sends it as is with raw.
func (c *ollamaGenerateRequest) toRunner() (runnerapi.Request, error) {
	var req runnerapi.Request
	switch {
	case len(c.Images) > 0:
		return req, errors.New("images: this model takes text only")
	case c.Suffix != "":
		return req, errors.New("suffix (fill-in-the-middle) is not supported")
	case c.Prompt == "":
		return req, errLoadOnly
	case c.Raw:
		req.Prompt = c.Prompt
	default:
		if c.System != "" {
			req.Messages = append(req.Messages, runnerapi.Message{Role: "system", Content: c.System})
		}
		req.Messages = append(req.Messages, runnerapi.Message{Role: "user", Content: c.Prompt})
	}
	return req, c.apply(&req)
}

// errLoadOnly marks a generate request without a prompt, which Ollama
// answers by loading the model.
var errLoadOnly = errors.New("no prompt: load the model")
