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
