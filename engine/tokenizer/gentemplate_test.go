package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/chatfmt"
	"github.com/orrery-cluster/orrery/engine/chattmpl"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// plainChatML is the template generated models had before tools: what the
// tool-aware one must still render when there are none.
const plainChatML = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

func TestGeneratedTemplate(t *testing.T) {
	tmpl, err := chattmpl.Compile(model.ChatMLTemplate)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := chattmpl.Compile(plainChatML)
	tok := &Tokenizer{template: tmpl}
	tok.format, tok.thinks = chatfmt.Detect(model.ChatMLTemplate)
	if f, th := tok.ChatFormat(); f != chatfmt.Hermes || th {
		t.Errorf("format %q, thinks %v", f, th)
	}
	conv := []runnerapi.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "café?"}}
	got, err := tok.Chat(conv, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]chattmpl.Message, len(conv))
	for i, m := range conv {
		ms[i] = chattmpl.Message{Role: m.Role, Content: m.Content}
	}
	want, _ := old.Render(chattmpl.Context(ms, true, "", ""))
	if got != want {
		t.Errorf("without tools:\n%q\nwant plain ChatML:\n%q", got, want)
	}

	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`)
	withCall := append(conv[:2:2],
		runnerapi.Message{Role: "assistant", ToolCalls: []runnerapi.ToolCall{{ID: "call_0", Type: "function", Function: runnerapi.ToolCallFunction{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)}}}},
		runnerapi.Message{Role: "tool", ToolCallID: "call_0", Content: `{"temp": 3}`})
	got, err = tok.Chat(withCall, ChatOptions{Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"<|im_start|>system\nbe brief\n\n# Tools", `{"type": "function", "function": {"name": "get_weather"`,
		"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n",
		"<|im_start|>user\n<tool_response>\n{\"temp\": 3}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"} {
		if !strings.Contains(got, part) {
			t.Errorf("with tools, %q lacks %q", got, part)
		}
	}
	again, err := tok.Chat(withCall, ChatOptions{Tools: tools, Kwargs: map[string]any{"messages": "x", "add_generation_prompt": false, "enable_thinking": false}})
	if err != nil || again != got {
		t.Errorf("keyword arguments replaced the request's own variables: %v\n%q", err, again)
	}
	if strings.Count(got, "be brief") != 1 {
		t.Errorf("the system message is printed %d times", strings.Count(got, "be brief"))
	}
}
