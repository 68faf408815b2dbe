package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/chatstream"
)

// Error answers carry the agent's message in either of its shapes.
func TestErrorMessages(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":"no such trace"}`:                                "no such trace",
		`{"error":{"message":"model x is not loaded","type":"t"}}`: "model x is not loaded",
		"  plain text\n":                                           "plain text",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, body)
		}))
		_, err := New(srv.URL + "/").Health(context.Background())
		srv.Close()
		var e *Error
		if !errors.As(err, &e) || e.Status != 404 || e.Message != want || e.URL != srv.URL+"/healthz" || e.Method != "GET" {
			t.Errorf("%s: %#v", body, err)
		}
	}
}

// Path segments and queries are escaped; a failed trace open carries the
// page to open by hand.
func TestEscapingAndPageURL(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		if r.URL.Path == "/v1/traces/a b/open" {
			w.WriteHeader(http.StatusNotImplemented)
			io.WriteString(w, `{"error":"no browser","url":"http://x/perfetto/a%20b"}`)
			return
		}
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	c := New(srv.URL)
	ctx := context.Background()
	if _, err := c.Previews(ctx, "a&b c+d#e", nil); err != nil {
		t.Fatal(err)
	}
	three := runnerapi.GPULayers(3)
	if _, err := c.Previews(ctx, "m", &three); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TraceStats(ctx, "../x"); err != nil {
		t.Fatal(err)
	}
	_, err := c.OpenTrace(ctx, "a b")
	var e *Error
	if !errors.As(err, &e) || e.PageURL != "http://x/perfetto/a%20b" {
		t.Errorf("open: %v", err)
	}
	want := []string{"/instance/previews?model=" + url.QueryEscape("a&b c+d#e"), "/instance/previews?gpuLayers=3&model=m", "/v1/traces/..%2Fx/stats?", "/v1/traces/a%20b/open?"}
	if fmt.Sprint(paths) != fmt.Sprint(want) {
		t.Errorf("paths %q, want %q", paths, want)
	}
}

// ChatStream sends stream on, hands over the chunks and returns the trace
// id; Timeout bounds a request without its own deadline.
func TestChatStreamAndTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			<-r.Context().Done() // a stuck agent
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set(TraceIDHeader, "chat-7")
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\ndata: [DONE]\n\n", string(b))
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, Timeout: 50 * time.Millisecond}
	var got string
	id, err := c.ChatStream(context.Background(), ChatRequest{Model: "m", Messages: []ChatMessage{{"user", "hi"}}},
		func(ch chatstream.Chunk) { got += ch.Content() })
	if err != nil || id != "chat-7" || got != `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}` {
		t.Errorf("ChatStream = %q, %v; request %s", id, err, got)
	}
	if _, err := c.Health(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stuck agent: %v", err)
	}
}

func TestParseBaseURL(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:1": "http://127.0.0.1:1", "https://h:2/": "https://h:2"} {
		if got, err := ParseBaseURL(in); err != nil || got != want {
			t.Errorf("ParseBaseURL(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"ftp://h:1", "http://", "http://h:1/state"} {
		if _, err := ParseBaseURL(bad); err == nil {
			t.Errorf("ParseBaseURL(%q) took it", bad)
		}
	}
}
