package chattmpl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

const (
	// ConformanceBOS and ConformanceEOS are the bos_token and eos_token of
	// the conformance conversations.
	ConformanceBOS = "<s>"
	ConformanceEOS = "</s>"
)

// FixedNow is the time strftime_now formats in the conformance test (and in
// test/llamaref/render_templates.py), so that outputs are reproducible.
var FixedNow = time.Date(2026, 1, 15, 9, 5, 7, 0, time.UTC)

// Message is one plain chat message as a template sees it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Conversation is one fixed input of the conformance test. Messages and
// Tools are JSON (key order matters to templates that print them).
type Conversation struct {
	Name                string          `json:"name"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools,omitempty"` // absent: tools=None, as HF passes
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	// Extra marks conversations beyond the fixed set.
	Extra bool `json:"extra,omitempty"`
}

const (
	convSystem    = `{"role": "system", "content": "You are a helpful assistant."}`
	convUser1     = `{"role": "user", "content": "Hello! Qu'est-ce qu'un café?"}`
	convAssistant = `{"role": "assistant", "content": "A café is a coffee shop.\nIt serves coffee."}`
	convUser2     = `{"role": "user", "content": "  And a \"bistro\"?  "}`
	convTools     = `[{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
		"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"},
		"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]`
	convToolCall = `{"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
		"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}`
	convToolResult = `{"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}`
	convParts      = `{"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this café."}]}`
	convReasoning  = `{"role": "assistant", "reasoning_content": "The user wants a definition.", "content": "<think>\nA definition.\n</think>\n\nA café is a coffee shop."}`
)

// Conversations are the inputs every reference template is rendered with:
// the fixed set (a lone user message, system+user and a
// multi-turn chat with an assistant reply, each with and without the
// generation prompt) and, marked Extra, tool use, content given as a list
// of parts, and an assistant turn with reasoning.
func Conversations() []Conversation {
	msgs := func(ms ...string) json.RawMessage {
		var b bytes.Buffer
		b.WriteString("[")
		for i, m := range ms {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(m)
		}
		b.WriteString("]")
		return b.Bytes()
	}
	return []Conversation{
		{Name: "user", Messages: msgs(convUser1), AddGenerationPrompt: true},
		{Name: "system_user", Messages: msgs(convSystem, convUser1), AddGenerationPrompt: true},
		{Name: "system_user_nogen", Messages: msgs(convSystem, convUser1)},
		{Name: "multi_turn", Messages: msgs(convSystem, convUser1, convAssistant, convUser2), AddGenerationPrompt: true},
		{Name: "multi_turn_nogen", Messages: msgs(convSystem, convUser1, convAssistant, convUser2)},
		{Name: "tools", Messages: msgs(convSystem, convUser1), Tools: json.RawMessage(convTools), AddGenerationPrompt: true, Extra: true},
		{Name: "tool_call", Messages: msgs(convSystem, convUser1, convToolCall, convToolResult), Tools: json.RawMessage(convTools),
			AddGenerationPrompt: true, Extra: true},
		{Name: "content_parts", Messages: msgs(convSystem, convParts), AddGenerationPrompt: true, Extra: true},
		{Name: "reasoning", Messages: msgs(convUser1, convReasoning, convUser2), AddGenerationPrompt: true, Extra: true},
	}
}

// Vars returns the conversation's template variables, as Hugging Face
// passes them, with strftime_now fixed at FixedNow.
func (c Conversation) Vars() (map[string]any, error) {
	msgs, err := DecodeJSON(c.Messages)
	if err != nil {
		return nil, fmt.Errorf("conversation %s messages: %w", c.Name, err)
	}
	var tools any
	if len(c.Tools) > 0 {
		if tools, err = DecodeJSON(c.Tools); err != nil {
			return nil, fmt.Errorf("conversation %s tools: %w", c.Name, err)
		}
	}
	vars := Context(nil, c.AddGenerationPrompt, ConformanceBOS, ConformanceEOS)
	vars["messages"] = msgs
	vars["tools"] = tools
	vars["strftime_now"] = StrftimeNow(FixedNow)
	return vars, nil
}

// Context builds the variables Hugging Face passes a chat template:
// messages, bos_token, eos_token, add_generation_prompt, and tools and
// documents as None. raise_exception and strftime_now (the current time)
// are globals of every Template.
func Context(msgs []Message, addGenerationPrompt bool, bos, eos string) map[string]any {
	ms := make([]any, len(msgs))
	for i, m := range msgs {
		ms[i] = FromGo(m) // role, then content, as a JSON object would be
	}
	return map[string]any{
		"messages":              ms,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             bos,
		"eos_token":             eos,
		"tools":                 nil,
		"documents":             nil,
	}
}

// DecodeJSON decodes JSON into template values, keeping object key order
// (*Dict), with integers as int64 and other numbers as float64.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > 1000 {
		return nil, fmt.Errorf("JSON nested too deep")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '[':
			out := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("JSON object key is not a string")
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Set(k, v)
			}
			_, err := dec.Token()
			return d, err
		}
		return nil, fmt.Errorf("unexpected %v", x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		return x.Float64()
	}
	return t, nil // string, bool, nil
}
