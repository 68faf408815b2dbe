package app

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProxyStreamsSSEAndRewritesHost(t *testing.T) {
	release := make(chan struct{})
	agentSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != strings.TrimPrefix(agentURL(r), "http://") {
			// The agent refuses hosts that are not loopback names.
			http.Error(w, "host "+r.Host+" not allowed", http.StatusForbidden)
			return
		}
		if r.Header.Get("Origin") != "" {
			http.Error(w, "origin passed on", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/events/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select { // the stream stays open until the test saw the event
			case <-release:
			case <-r.Context().Done():
			}
			io.WriteString(w, "data: second\n\n")
		default:
			io.WriteString(w, "path "+r.URL.Path+" query "+r.URL.RawQuery)
		}
	}))
	defer agentSrv.Close()
	defer close(release)
	h, err := NewProxy(agentSrv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	win := httptest.NewServer(h)
	defer win.Close()

	// A plain request, as the webview sends it (Host "wails").
	req, _ := http.NewRequest("GET", win.URL+"/state/nodeMemory?x=1", nil)
	req.Host = "wails"
	req.Header.Set("Origin", "wails://wails")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "path /state/nodeMemory query x=1" {
		t.Fatalf("proxied request: %d %s", resp.StatusCode, body)
	}

	// The first event arrives while the agent still holds the stream open.
	req, _ = http.NewRequest("GET", win.URL+"/events/stream", nil)
	req.Host = "wails"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "data: first\n" {
			t.Errorf("first line %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SSE event held back by the proxy")
	}
}

// agentURL is the URL the test agent is reached at (its listener's address).
func agentURL(r *http.Request) string {
	return "http://" + r.Context().Value(http.LocalAddrContextKey).(interface{ String() string }).String()
}

func TestProxyRootGoesToUI(t *testing.T) {
	agentSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("root reached the agent: %s", r.URL.Path)
	}))
	defer agentSrv.Close()
	h, _ := NewProxy(agentSrv.URL, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "location.replace('/ui/'") ||
		!strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Errorf("root: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}

func TestProxyAgentDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	h, _ := NewProxy(dead.URL, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/", nil))
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "does not answer") {
		t.Errorf("agent down: %d %s", rec.Code, rec.Body)
	}
	if _, err := NewProxy("not a url", nil); err == nil {
		t.Error("a bad target was taken")
	}
}

func TestProxyPassesPOSTBody(t *testing.T) {
	agentSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, r.Method+" "+r.Header.Get("Content-Type")+" "+string(b))
	}))
	defer agentSrv.Close()
	h, _ := NewProxy(agentSrv.URL, nil)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/traces/t1/open", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted || rec.Body.String() != "POST application/json {}" {
		t.Errorf("POST: %d %s", rec.Code, rec.Body)
	}
}
