package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// orrery tokenize against a fake agent: the request it sends, its three
// output forms, stdin, and its exit codes.
func TestTokenizeCommand(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		json.NewDecoder(r.Body).Decode(&got)
		if got["model"] == "missing" {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"message":"model not found: missing","type":"invalid_request_error","code":"model_not_found"}}`))
			return
		}
		w.Write([]byte(`{"tokens":[{"id":1,"piece":"<s>"},{"id":42,"piece":" hi"},{"id":200,"piece":[195]}]}`))
	}))
	t.Cleanup(srv.Close)
	cmd := func(stdin string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runTokenize(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, _ := cmd("", "--api", srv.URL, "--model", "m", "hi")
	if code != 0 || out != "1\t\"<s>\"\n42\t\" hi\"\n200\t[195]\n3 tokens\n" || got["content"] != "hi" || got["add_special"] != true || got["with_pieces"] != true {
		t.Fatalf("%d %q, sent %v", code, out, got)
	}
	code, out, _ = cmd("from stdin", "--api", srv.URL, "--ids", "--no-special", "--model", "m", "-")
	if code != 0 || out != "1 42 200\n" || got["content"] != "from stdin" || got["add_special"] != false {
		t.Fatalf("--ids: %d %q, sent %v", code, out, got)
	}
	if code, out, _ = cmd("", "--api", srv.URL, "--model", "m", "--pieces", "hi"); code != 0 || out != "\"<s>\"\n\" hi\"\n[195]\n" {
		t.Fatalf("--pieces: %d %q", code, out)
	}
	if code, _, errOut := cmd("", "--api", srv.URL, "--model", "missing", "x"); code != 1 || !strings.Contains(errOut, "model not found: missing") {
		t.Fatalf("unknown model: %d %q", code, errOut)
	}
	for _, args := range [][]string{{"x"}, {"--model", "m"}, {"--model", "m", "a", "b"}, {"--model", "m", "--ids", "--pieces", "x"}} {
		if code, _, _ := cmd("", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := cmd("", "--api", "http://127.0.0.1:1", "--model", "m", "x"); code != 1 || !strings.Contains(errOut, "no agent answers") {
		t.Errorf("no agent: %d %q", code, errOut)
	}
	if code, _, errOut := cmd("", "-h"); code != 0 || !strings.Contains(errOut, "Usage: orrery tokenize") {
		t.Errorf("-h: %d %q", code, errOut)
	}
}
