package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAnthropicRequests(t *testing.T) {
	parse := func(body string) (*anthropicRequest, error) {
		var a anthropicRequest
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		req, err := a.toRunner()
		if err == nil && strings.Contains(body, "tool_result") {
			// a user turn of results becomes tool messages
			roles := ""
			for _, m := range req.Messages {
				roles += m.Role + " "
			}
			if !strings.Contains(roles, "assistant tool ") {
				t.Errorf("%s: roles %s", body, roles)
			}
		}
		return &a, err
	}
	const tool = `"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	for _, ok := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"thinking":{"type":"enabled","budget_tokens":1024}}`,
		`{"model":"m","max_tokens":5,` + tool + `,"tool_choice":{"type":"tool","name":"get_weather"},"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,` + tool + `,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":""},{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Oslo"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"3 C"}]}]}]}`,
	} {
		if _, err := parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, tc := range []struct{ body, says string }{
		{`{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "model"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, `messages.0.role: "system"`},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "image blocks are not supported"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","name":"f","input":{}}]}]}`, `"tool_use" block in a user message`},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":[1]}]}]}`, "input object"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]}`, "content: want"},
		{`{"model":"m","max_tokens":5,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]}`, "no tools"},
		{`{"model":"m","max_tokens":5,` + tool + `,"tool_choice":{"type":"sometimes"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.type"},
		{`{"model":"m","max_tokens":5,"tools":[{"name":"a b"}],"messages":[{"role":"user","content":"x"}]}`, "tools.0.name"},
	} {
		if _, err := parse(tc.body); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.says)
		}
	}
}

// Any /v1/messages body either becomes a valid runner request or is
// refused with an error; nothing panics.
func FuzzAnthropicRequest(f *testing.F) {
	f.Add(`{"model":"m","max_tokens":5,"system":"s","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x","is_error":true}]}]}`)
	f.Add(`{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var a anthropicRequest
		if json.Unmarshal([]byte(body), &a) != nil {
			return
		}
		req, err := a.toRunner()
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil || req.MaxTokens < 1 {
			t.Fatalf("accepted an invalid request (max tokens %d): %v", req.MaxTokens, err)
		}
	})
}
