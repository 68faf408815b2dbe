package app

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// fakeAgent serves the fixtures as an agent's API does.
type fakeAgent struct {
	*httptest.Server
	statsCalls atomic.Int32
	opened     atomic.Value // string: the last open request's body
	openStatus int          // what POST …/open answers; 0 is 200
}

func newFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	f := &fakeAgent{}
	stateJSON := readFixture(t, "state.json", nil)
	tracesJSON := readFixture(t, "traces.json", nil)
	statsJSON := readFixture(t, "stats.json", nil)
	mux := http.NewServeMux()
	serve := func(b []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
		}
	}
	mux.HandleFunc("GET /state", serve(stateJSON))
	mux.HandleFunc("GET /v1/traces", serve(tracesJSON))
	mux.HandleFunc("GET /v1/traces/{id}/stats", func(w http.ResponseWriter, r *http.Request) {
		f.statsCalls.Add(1)
		if r.PathValue("id") != "chat-1796297970082-72a30086" {
			http.Error(w, `{"error":"no such trace"}`, http.StatusNotFound)
			return
		}
		serve(statsJSON)(w, r)
	})
	mux.HandleFunc("POST /v1/traces/{id}/open", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, `{"error":"open: want Content-Type: application/json"}`, http.StatusUnsupportedMediaType)
			return
		}
		b, _ := io.ReadAll(r.Body)
		f.opened.Store(r.PathValue("id") + " " + string(b))
		page := "http://" + r.Host + "/perfetto/" + r.PathValue("id")
		if f.openStatus != 0 {
			w.WriteHeader(f.openStatus)
			io.WriteString(w, `{"error":"open a browser: xdg-open: not found; open the url yourself","url":"`+page+`"}`)
			return
		}
		io.WriteString(w, `{"taskId":"`+r.PathValue("id")+`","url":"`+page+`","opened":true}`)
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func TestClientReadsAgent(t *testing.T) {
	f := newFakeAgent(t)
	c := &Client{BaseURL: f.URL}
	ctx := context.Background()
	st, err := c.State(ctx)
	if err != nil || len(st.NodeIdentities) != 3 || len(st.Runners) != 3 {
		t.Fatalf("State: %d identities, %d runners, %v", len(st.NodeIdentities), len(st.Runners), err)
	}
	ts, err := c.Traces(ctx)
	if err != nil || len(ts) != 5 || ts[0].Kind != "chat" {
		t.Fatalf("Traces: %+v, %v", ts, err)
	}
	stats, err := c.TraceStats(ctx, ts[0].TaskID)
	if _, ok := stats.DecodeTokPerS(); err != nil || !ok {
		t.Fatalf("TraceStats: %+v, %v", stats, err)
	}
	_, err = c.TraceStats(ctx, "nope")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Message != "no such trace" {
		t.Errorf("missing trace: %v", err)
	}
	page, err := c.OpenTrace(ctx, "ring-1")
	if err != nil || page != f.URL+"/perfetto/ring-1" || f.opened.Load() != "ring-1 {}" {
		t.Errorf("OpenTrace = %q, %v; agent got %v", page, err, f.opened.Load())
	}
}

func TestClientUnreachableAndSlow(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := (&Client{BaseURL: dead.URL}).State(context.Background()); err == nil {
		t.Error("a closed port answered")
	}
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer stuck.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := (&Client{BaseURL: stuck.URL}).State(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stuck agent: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}
