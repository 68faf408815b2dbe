package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestOllamaRequests(t *testing.T) {
	chat := func(body string) error {
		var c ollamaChatRequest
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		_, err := c.toRunner()
		return err
	}
	gen := func(body string) error {
		var c ollamaGenerateRequest
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		_, err := c.toRunner()
		return err
	}
	for _, ok := range []string{
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"options":{"temperature":0,"num_predict":-1,"seed":3,"stop":["a"],"num_ctx":4096},"think":true,"format":"json"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","tool_name":"f","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"think":"low"}`,
	} {
		if err := chat(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, tc := range []struct{ body, says string }{
		{`{"messages":[{"role":"user","content":"x"}]}`, "model is required"},
		{`{"model":"m","messages":[]}`, "messages: want"},
		{`{"model":"m","messages":[{"role":"user","content":"x","images":["aGk="]}]}`, "text only"},
		{`{"model":"m","messages":[{"role":"wizard","content":"x"}]}`, `role "wizard"`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"think":"max"}`, "think:"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"format":"yaml"}`, `format "yaml"`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"format":{"type":"string","pattern":"a"}}`, "format: json schema at /pattern"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"options":{"temperature":-1}}`, "temperature"},
		{`{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]}`, "want a JSON object"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, "tools[0]"},
	} {
		if err := chat(tc.body); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.says)
		}
	}
	if err := gen(`{"model":"m","prompt":"hi","system":"be brief","raw":false}`); err != nil {
		t.Errorf("generate: %v", err)
	}
	for _, tc := range []struct{ body, says string }{
		{`{"model":"m","prompt":"hi","images":["aGk="]}`, "text only"},
		{`{"model":"m","prompt":"def f(","suffix":"return 1"}`, "suffix"},
		{`{"model":"m","prompt":""}`, "no prompt"},
	} {
		if err := gen(tc.body); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("generate %s: %v, want %q", tc.body, err, tc.says)
		}
	}
}

// Any /api/chat or /api/generate body either becomes a valid runner
// request or is refused with an error; nothing panics.
func FuzzOllamaRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"}],"options":{"num_predict":5},"format":{"type":"object","properties":{"a":{"type":"integer"}}}}`, false)
	f.Add(`{"model":"m","prompt":"x","system":"s","think":"high","keep_alive":"5m"}`, true)
	f.Add(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{}}}]}]}`, false)
	f.Fuzz(func(t *testing.T, body string, generate bool) {
		var c completionBody = &ollamaChatRequest{}
		if generate {
			c = &ollamaGenerateRequest{}
		}
		if json.Unmarshal([]byte(body), c) != nil {
			return
		}
		req, err := c.toRunner()
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
	})
}

// A body that is not JSON is refused before anything happens: a web page
// could send text/plain without a preflight, and an empty generate would
// otherwise place a model.
func TestOllamaWantsJSON(t *testing.T) {
	st, _ := newStore(8)
	srv := serve(t, st)
	for _, path := range []string{"/api/generate", "/api/show"} {
		resp, err := http.Post(srv.URL+path, "text/plain", strings.NewReader(`{"model":"m","prompt":""}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("%s as text/plain: %d, want 415", path, resp.StatusCode)
		}
	}
}
