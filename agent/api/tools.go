package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// maxTools bounds a request's tools.
const maxTools = 128

// toolName is OpenAI's rule for function names.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// chatToolCall is an assistant message's call, as OpenAI writes it: the
// arguments a string holding a JSON object.
type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolFields moves a message's tool fields into m, checking them: calls
// only on assistant messages, each naming a function with a JSON object
// for arguments.
func (cm chatMessage) toolFields(m *runnerapi.Message) error {
	if len(cm.ToolCalls) > 0 && cm.Role != "assistant" {
		return errors.New("tool_calls: only assistant messages make calls")
	}
	for j, tc := range cm.ToolCalls {
		if (tc.Type != "" && tc.Type != "function") || !toolName.MatchString(tc.Function.Name) {
			return fmt.Errorf("tool_calls[%d]: want {id, type: \"function\", function: {name, arguments}} with a name of 1-64 letters, digits, _ or -", j)
		}
		args := json.RawMessage(tc.Function.Arguments)
		if tc.Function.Arguments == "" {
			args = json.RawMessage("{}")
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) != nil {
			return fmt.Errorf("tool_calls[%d].function.arguments: want a string holding a JSON object", j)
		}
		m.ToolCalls = append(m.ToolCalls, runnerapi.ToolCall{ID: tc.ID, Type: "function",
			Function: runnerapi.ToolCallFunction{Name: tc.Function.Name, Arguments: args}})
	}
	m.ToolCallID, m.Name = cm.ToolCallID, cm.Name
	return nil
}

// applyTools checks tools and tool_choice and puts them in req. A forced
// call (tool_choice "required" or a named function) is enforced by a
// grammar, so each tool's parameters must be a schema the grammar can
// enforce: one it cannot is an error naming the tool and the JSON pointer.
func (c *chatRequest) applyTools(req *runnerapi.Request) error {
	choice, err := toolChoiceOf(c.ToolChoice)
	if err != nil {
		return err
	}
	if len(c.Tools) == 0 || string(c.Tools) == "null" {
		if choice != "" && choice != "none" && choice != "auto" {
			return fmt.Errorf("tool_choice %q without tools", choice)
		}
		return nil
	}
	var tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(c.Tools, &tools); err != nil {
		return fmt.Errorf("tools: want an array of {type: \"function\", function: {name, description, parameters}}: %v", err)
	}
	if len(tools) > maxTools {
		return fmt.Errorf("tools: %d, at most %d", len(tools), maxTools)
	}
	forced := choice != "" && choice != "auto" && choice != "none"
	found := choice == "required" || !forced
	for i, t := range tools {
		if t.Type != "function" || !toolName.MatchString(t.Function.Name) {
			return fmt.Errorf("tools[%d]: want {type: \"function\", function: {name, parameters}} with a name of 1-64 letters, digits, _ or -", i)
		}
		p := t.Function.Parameters
		if len(p) > 0 && string(p) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(p, &obj) != nil {
				return fmt.Errorf("tools[%d].function.parameters: want a JSON Schema object", i)
			}
		}
		if !forced || (choice != "required" && choice != t.Function.Name) {
			continue
		}
		found = true
		if len(p) > 0 && string(p) != "null" {
			if _, err := schemaSpec(p, fmt.Sprintf("tools[%d].function.parameters", i)); err != nil {
				return err
			}
		}
	}
	if !found {
		return fmt.Errorf("tool_choice names %q, which is not among the tools", choice)
	}
	if forced && req.Grammar != nil {
		return errors.New("tool_choice forcing a call cannot be combined with response_format")
	}
	req.Tools, req.ToolChoice = c.Tools, choice
	req.ParallelToolCalls = c.ParallelToolCalls == nil || *c.ParallelToolCalls
	return nil
}

// toolChoiceOf reads tool_choice: "none", "auto", "required", or
// {type: "function", function: {name}} (which becomes the name).
func toolChoiceOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return s, nil
		}
		return "", fmt.Errorf("tool_choice %q: want none, auto, required or {type: \"function\", function: {name}}", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || !toolName.MatchString(named.Function.Name) {
		return "", errors.New(`tool_choice: want none, auto, required or {type: "function", function: {name}}`)
	}
	return named.Function.Name, nil
}

// chatKwargs are the template arguments a request sets: llama.cpp's
// chat_template_kwargs, and reasoning_effort and enable_thinking at the
// top level.
func (c *chatRequest) chatKwargs() map[string]any {
	kw := map[string]any{}
	for k, v := range c.ChatTemplateKwargs {
		kw[k] = v
	}
	if c.ReasoningEffort != "" {
		kw["reasoning_effort"] = c.ReasoningEffort
	}
	if c.EnableThinking != nil {
		kw["enable_thinking"] = *c.EnableThinking
	}
	if len(kw) == 0 {
		return nil
	}
	return kw
}

// openAICall is a parsed call in OpenAI's shape; id is made from the
// completion's id, so that it is unique and stable across a stream.
func openAICall(completionID string, c runnerapi.Call) map[string]any {
	return map[string]any{"id": fmt.Sprintf("call_%s_%d", completionID, c.Index), "type": "function",
		"function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
}

// toolCallDeltas are a parsed call as OpenAI streams one: a chunk naming
// it with empty arguments, then one with the arguments.
func toolCallDeltas(completionID string, c runnerapi.Call) []map[string]any {
	head := openAICall(completionID, c)
	head["index"] = c.Index
	head["function"] = map[string]any{"name": c.Name, "arguments": ""}
	args := map[string]any{"index": c.Index, "function": map[string]any{"arguments": c.Arguments}}
	return []map[string]any{{"tool_calls": []any{head}}, {"tool_calls": []any{args}}}
}

// finishReason is the runner's, or "tool_calls" where an answer that
// stopped made calls (as OpenAI reports it).
func finishReason(d *runnerapi.Done, called bool) string {
	if called && d.FinishReason == "stop" {
		return "tool_calls"
	}
	return d.FinishReason
}
