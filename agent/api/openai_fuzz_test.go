package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// Any body either parses into a valid runner request with one message per
// input message, or is refused; re-encoding what parsed parses the same.
func FuzzChatRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5,"stop":"x"}`)
	f.Add(`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"stop":["a","b"],"temperature":0.5,"top_p":0.9,"seed":3}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`)
	f.Add(`{"model":"","messages":[]}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"}],"n":2,"max_tokens":-1}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object","properties":{"a":{"enum":[1,2]}},"required":["a"]}}}}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"tool_choice":"required"}`)
	f.Fuzz(func(t *testing.T, body string) {
		var cr chatRequest
		if json.Unmarshal([]byte(body), &cr) != nil {
			return
		}
		req, err := cr.toRunner()
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
		if len(req.Messages) != len(cr.Messages) || req.MaxTokens < 0 {
			t.Fatalf("%d messages from %d, max tokens %d", len(req.Messages), len(cr.Messages), req.MaxTokens)
		}
		b, err := json.Marshal(cr)
		if err != nil {
			t.Fatal(err)
		}
		var again chatRequest
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatal(err)
		}
		req2, err := again.toRunner()
		if err != nil || len(req2.Messages) != len(req.Messages) || req2.MaxTokens != req.MaxTokens || len(req2.Stop) != len(req.Stop) {
			t.Fatalf("round trip: %+v vs %+v (%v)", req2, req, err)
		}
		for i := range req.Messages {
			if !reflect.DeepEqual(req.Messages[i], req2.Messages[i]) {
				t.Fatalf("message %d: %+v vs %+v", i, req.Messages[i], req2.Messages[i])
			}
		}
	})
}

// Any legacy completion body either parses into a valid runner request
// with exactly one prompt (text or ids), or is refused; re-encoding what
// parsed parses the same.
func FuzzCompletionRequest(f *testing.F) {
	f.Add(`{"model":"m","prompt":"hi","stream":true,"max_tokens":5,"stop":"x","logprobs":3}`)
	f.Add(`{"model":"m","prompt":[1,2,3],"echo":true}`)
	f.Add(`{"model":"m","prompt":[[1,2]],"logprobs":0}`)
	f.Add(`{"model":"m","prompt":["a"],"temperature":0}`)
	f.Add(`{"model":"m","prompt":["a","b"]}`)
	f.Add(`{"model":"m","prompt":[[]],"logprobs":1,"echo":true}`)
	f.Fuzz(func(t *testing.T, body string) {
		var cr completionRequest
		if json.Unmarshal([]byte(body), &cr) != nil {
			return
		}
		req, err := cr.toRunner()
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
		if (req.Prompt == "") == (len(req.PromptTokens) == 0) || len(req.Messages) != 0 || req.Echo && req.Logprobs {
			t.Fatalf("request %+v", req)
		}
		b, err := json.Marshal(cr)
		if err != nil {
			t.Fatal(err)
		}
		var again completionRequest
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatal(err)
		}
		req2, err := again.toRunner()
		if err != nil || req2.Prompt != req.Prompt || !slices.Equal(req2.PromptTokens, req.PromptTokens) || req2.TopLogprobs != req.TopLogprobs {
			t.Fatalf("round trip: %+v vs %+v (%v)", req2, req, err)
		}
	})
}
