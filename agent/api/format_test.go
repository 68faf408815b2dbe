package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResponseFormat(t *testing.T) {
	chat := func(format string) (*chatRequest, error) {
		var cr chatRequest
		body := `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":` + format + `}`
		if err := json.Unmarshal([]byte(body), &cr); err != nil {
			t.Fatal(err)
		}
		req, err := cr.toRunner()
		if err != nil {
			return nil, err
		}
		if req.Grammar == nil && !strings.Contains(format, "text") {
			t.Errorf("%s: no grammar", format)
		}
		if req.Grammar != nil && strings.Contains(format, "text") {
			t.Errorf("%s: a grammar for text", format)
		}
		return &cr, nil
	}
	for _, ok := range []string{`{"type":"text"}`, `{"type":"json_object"}`,
		`{"type":"json_schema","json_schema":{"name":"w","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}}}`} {
		if _, err := chat(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, tc := range []struct{ format, says string }{
		{`{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"^a"}}}}}`,
			"response_format.json_schema.schema: json schema at /properties/a/pattern"},
		{`{"type":"json_schema","json_schema":{"name":"w"}}`, "schema is required"},
		{`{"type":"yaml"}`, `"yaml"`},
	} {
		if _, err := chat(tc.format); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.format, err, tc.says)
		}
	}
}

func TestToolsRequest(t *testing.T) {
	const weather = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`
	parse := func(extra string) (*chatRequest, error) {
		var cr chatRequest
		body := `{"model":"m","messages":[{"role":"user","content":"x"}]` + extra + `}`
		if err := json.Unmarshal([]byte(body), &cr); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		req, err := cr.toRunner()
		if err == nil && strings.Contains(extra, `"tools"`) && len(req.Tools) == 0 {
			t.Errorf("%s: tools dropped", extra)
		}
		return &cr, err
	}
	for _, ok := range []string{`,"tools":[` + weather + `]`, `,"tools":[` + weather + `],"tool_choice":"required"`,
		`,"tools":[` + weather + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false`,
		`,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"3 C"}]`,
		`,"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"low"`} {
		if _, err := parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, tc := range []struct{ extra, says string }{
		{`,"tools":{"a":1}`, "tools: want an array"},
		{`,"tools":[{"type":"function","function":{"name":"a b"}}]`, "tools[0]"},
		{`,"tools":[{"type":"retrieval"}]`, "tools[0]"},
		{`,"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]`, "tools[0].function.parameters"},
		{`,"tools":[` + weather + `],"tool_choice":"always"`, `tool_choice "always"`},
		{`,"tools":[` + weather + `],"tool_choice":{"type":"function","function":{"name":"nope"}}`, "not among the tools"},
		{`,"tool_choice":"required"`, "without tools"},
		{`,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","format":"email"}}}}}],"tool_choice":"required"`,
			"tools[0].function.parameters: json schema at /properties/a/format"},
		{`,"tools":[` + weather + `],"tool_choice":"required","response_format":{"type":"json_object"}`, "cannot be combined"},
		{`,"messages":[{"role":"user","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}],"content":"x"}]`, "only assistant"},
		{`,"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"[1]"}}]}]`, "arguments: want a string holding a JSON object"},
		{`,"messages":[{"role":"tool","content":null}]`, "content is required"},
		{`,"messages":[{"role":"robot","content":"x"}]`, `role "robot"`},
		{`,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:"}}]}]`, "only text"},
	} {
		if _, err := parse(tc.extra); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.extra, err, tc.says)
		}
	}
}
