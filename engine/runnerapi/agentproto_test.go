package runnerapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeAgent serves the agent's side of the protocol: a rank link that
// greets with "hello" right after the 101 (so that it lands in the HTTP
// reader's buffer), and a span upload.
func fakeAgent(t *testing.T, got chan<- RankTrace) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+RankLinkPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(AuthHeader) != BearerPrefix+"tok" || r.Header.Get("Upgrade") != RankLinkUpgrade {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + RankLinkUpgrade + "\r\n\r\nhello")
		rw.Flush()
		b := make([]byte, 4)
		io.ReadFull(rw, b)
		rw.WriteString(strings.ToUpper(string(b)))
		rw.Flush()
		c.Close()
	})
	mux.HandleFunc("POST "+RankTracePath, func(w http.ResponseWriter, r *http.Request) {
		var rt RankTrace
		if r.Header.Get(AuthHeader) != BearerPrefix+"tok" || json.NewDecoder(r.Body).Decode(&rt) != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		got <- rt
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestDialRankLink(t *testing.T) {
	addr := fakeAgent(t, nil)
	c, err := DialRankLink(context.Background(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("ping"))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "helloPING" {
		t.Errorf("link read %q, %v; want the buffered greeting, then the answer", b, err)
	}
	if _, err := DialRankLink(context.Background(), addr, "wrong"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a wrong token: %v", err)
	}
}

func TestPostRankTrace(t *testing.T) {
	got := make(chan RankTrace, 1)
	addr := fakeAgent(t, got)
	if err := PostRankTrace(context.Background(), addr, "tok", RankTrace{TraceID: "chat-1", Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	if rt := <-got; rt.TraceID != "chat-1" || rt.Error != "boom" {
		t.Errorf("agent got %+v", rt)
	}
	if err := PostRankTrace(context.Background(), addr, "wrong", RankTrace{TraceID: "x"}); err == nil {
		t.Error("a refused upload is not an error")
	}
}
