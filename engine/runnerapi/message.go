package runnerapi

import "encoding/json"

// Message is one chat message, in the shape chat templates read
// (OpenAI's, with tool calls' arguments as objects).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ToolCalls are an assistant's calls; ToolCallID and Name say which
	// call a "tool" message answers.
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
	// Reasoning is an assistant turn's reasoning, for templates that
	// print it (reasoning_content).
	Reasoning string `json:"reasoning_content,omitempty"`
}

// ToolCall is one call in an assistant message.
type ToolCall struct {
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type"`
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction names the tool and its arguments: a JSON object, as
// templates print it with tojson.
type ToolCallFunction struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Call is one parsed tool call. Arguments is a JSON object's text.
type Call struct {
	Index     int    `json:"index"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}
