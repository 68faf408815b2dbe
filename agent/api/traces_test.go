package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/engine/trace/tracetest"
)

// traceFixture is an API serving a real trace store with three pipeline
// traces: "old" (oldest), "mid" and "new" (newest).
type traceFixture struct {
	dir    string // parent of the store; holds a secret file outside it
	store  *tracestore.Store
	srv    *httptest.Server
	traces map[string]*trace.Trace

	mu     sync.Mutex
	opened []string // URLs handed to OpenURL
}

const outsideSecret = "OUTSIDE-THE-STORE-SECRET"

func newTraceFixture(t *testing.T) *traceFixture {
	t.Helper()
	dir := t.TempDir()
	// A file next to the store that no request may ever reach.
	for _, name := range []string{"secret.json", "passwd"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"traceEvents":[],"x":"`+outsideSecret+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := tracestore.Open(tracestore.Config{Dir: filepath.Join(dir, "traces")})
	if err != nil {
		t.Fatal(err)
	}
	f := &traceFixture{dir: dir, store: ts, traces: map[string]*trace.Trace{}}
	now := time.Now().UTC().Truncate(time.Second)
	for i, c := range []struct {
		id    string
		spans int
		ranks int
	}{{"old", 120, 4}, {"mid", 300, 3}, {"new", 77, 2}} {
		tr := tracetest.Pipeline(tracetest.PipelineConfig{Spans: c.spans, Ranks: c.ranks, Flows: true, Counters: true})
		tr.TaskID = c.id
		if _, err := ts.Save(tracestore.Meta{
			TaskID: c.id, CreatedAt: now.Add(time.Duration(i-3) * time.Minute),
			Kind: "ring-bench", Spans: len(tr.Spans), Nodes: len(tr.Processes),
		}, func(w io.Writer) error { return trace.WriteChrome(w, tr) }); err != nil {
			t.Fatal(err)
		}
		f.traces[c.id] = tr
	}
	s := newAPI(nil)
	s.Traces = ts
	s.OpenURL = func(_ context.Context, u string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.opened = append(f.opened, u)
		if strings.Contains(u, "/old") {
			return errors.New("no browser here")
		}
		return nil
	}
	f.srv = httptest.NewServer(s.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

func TestTraceOpenInBrowser(t *testing.T) {
	f := newTraceFixture(t)
	post := func(path, ct string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, nil)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, m := post("/v1/traces/new/open", "application/json")
	want := f.srv.URL + "/perfetto/new"
	if code != 200 || m["url"] != want || m["opened"] != true {
		t.Errorf("open = %d %v, want 200 with url %s", code, m, want)
	}
	// The opener failing gives the URL to open by hand.
	if code, m := post("/v1/traces/old/open", "application/json"); code != http.StatusBadGateway || m["url"] != f.srv.URL+"/perfetto/old" ||
		!strings.Contains(fmt.Sprint(m["error"]), "no browser here") {
		t.Errorf("failed open = %d %v", code, m)
	}
	// A form post (what a cross-site page can send), an unknown and a bad
	// id open nothing.
	for _, c := range []struct {
		path, ct string
		code     int
	}{
		{"/v1/traces/new/open", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"/v1/traces/nope/open", "application/json", http.StatusNotFound},
		{"/v1/traces/..%2Fsecret/open", "application/json", http.StatusBadRequest},
	} {
		if code, m := post(c.path, c.ct); code != c.code {
			t.Errorf("POST %s (%s) = %d %v, want %d", c.path, c.ct, code, m, c.code)
		}
	}
	if r := get(t, f.srv.URL+"/v1/traces/new/open"); r.code != http.StatusMethodNotAllowed {
		t.Errorf("GET open = %d", r.code)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.opened) != 2 {
		t.Errorf("opener called for %v, want only new and old", f.opened)
	}
}

// With a token the API takes any Host; the page opened is still on the
// address the request came to, not on a host the caller names.
func TestTraceOpenIgnoresHost(t *testing.T) {
	f := newTraceFixture(t)
	s := newAPI(nil)
	s.Traces, s.AllowAnyHost = f.store, true
	var opened []string
	s.OpenURL = func(_ context.Context, u string) error { opened = append(opened, u); return nil }
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/traces/new/open", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := []string{srv.URL + "/perfetto/new"}; resp.StatusCode != http.StatusOK || !slices.Equal(opened, want) {
		t.Errorf("open with Host evil.example = %d, opened %v, want %v", resp.StatusCode, opened, want)
	}
}

func TestTraceList(t *testing.T) {
	f := newTraceFixture(t)
	r := get(t, f.srv.URL+"/v1/traces")
	if r.code != http.StatusOK {
		t.Fatalf("GET /v1/traces = %d %s", r.code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var page struct {
		Traces []map[string]json.RawMessage `json:"traces"`
	}
	decode(t, r.body, &page)
	var ids []string
	for _, m := range page.Traces {
		for _, k := range []string{"taskId", "createdAt", "fileSize", "kind", "partial", "spans", "nodes"} {
			if _, ok := m[k]; !ok {
				t.Errorf("trace %s: missing key %q", m["taskId"], k)
			}
		}
		var id string
		json.Unmarshal(m["taskId"], &id)
		ids = append(ids, id)
	}
	if got := strings.Join(ids, ","); got != "new,mid,old" {
		t.Errorf("ids = %s, want newest first: new,mid,old", got)
	}

	// An empty store, and a node without one, list [] rather than null.
	empty, err := tracestore.Open(tracestore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for name, ts := range map[string]TraceStore{"empty": empty, "none": nil} {
		s := newAPI(nil)
		s.Traces = ts
		rec := serveRecorded(s.Handler(), httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/traces", nil))
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != `{"traces":[]}` {
			t.Errorf("%s: GET /v1/traces = %d %s, want 200 {\"traces\":[]}", name, rec.Code, got)
		}
	}
}

func TestTraceGet(t *testing.T) {
	f := newTraceFixture(t)
	r := get(t, f.srv.URL+"/v1/traces/mid")
	if r.code != http.StatusOK {
		t.Fatalf("GET /v1/traces/mid = %d %s", r.code, r.body)
	}
	var m tracestore.Meta
	decode(t, r.body, &m)
	want, _ := f.store.Get("mid")
	if m.TaskID != "mid" || m.FileSize != want.FileSize || m.FileSize == 0 || !m.CreatedAt.Equal(want.CreatedAt) ||
		m.Spans != 300 || m.Kind != "ring-bench" {
		t.Errorf("meta = %+v, want %+v", m, want)
	}
	r = get(t, f.srv.URL+"/v1/traces/nope")
	if r.code != http.StatusNotFound {
		t.Errorf("GET unknown trace = %d %s, want 404", r.code, r.body)
	}
	wantJSONError(t, r)
}

func TestTraceStats(t *testing.T) {
	f := newTraceFixture(t)
	for id, tr := range f.traces {
		r := get(t, f.srv.URL+"/v1/traces/"+id+"/stats")
		if r.code != http.StatusOK {
			t.Fatalf("GET stats %s = %d %s", id, r.code, r.body)
		}
		m := object(t, r.body)
		for _, k := range []string{"taskId", "totalWallTimeUs", "byCategory", "byRank", "phases", "perStep", "byRankShare"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: stats lack %q: %v", id, k, keysOf(m))
			}
		}
		wantRaw(t, m, "taskId", `"`+id+`"`)
		want := trace.ComputeStats(tr.Spans)
		for key, v := range map[string]any{
			"totalWallTimeUs": want.TotalWallTimeUs, "byCategory": want.ByCategory, "byRank": want.ByRank,
			"phases": want.Phases, "perStep": want.PerStep, "byRankShare": want.ByRankShare,
		} {
			golden, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m[key], golden) {
				t.Errorf("%s: %s =\n%s\nwant (ComputeStats)\n%s", id, key, m[key], golden)
			}
		}
		if len(want.ByCategory) == 0 || want.ByCategory["decode/comms"].Count == 0 {
			t.Errorf("%s: the golden stats look empty: %+v", id, want.ByCategory)
		}
	}
}

func TestTraceRaw(t *testing.T) {
	f := newTraceFixture(t)
	r := get(t, f.srv.URL+"/v1/traces/old/raw")
	if r.code != http.StatusOK {
		t.Fatalf("GET raw = %d %s", r.code, r.body)
	}
	if got, want := r.header.Get("Content-Disposition"), `attachment; filename="old.json"`; got != want {
		t.Errorf("Content-Disposition = %q, want %q", got, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if !json.Valid(r.body) {
		t.Fatalf("raw trace is not valid JSON: %.200s", r.body)
	}
	meta, _ := f.store.Get("old")
	if int64(len(r.body)) != meta.FileSize {
		t.Errorf("raw is %d bytes, index says %d", len(r.body), meta.FileSize)
	}
	back, err := trace.ReadChrome(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(back.Spans), len(f.traces["old"].Spans); got != want {
		t.Errorf("raw loads back %d spans, want %d", got, want)
	}
	// HEAD answers the headers only.
	h := do(t, http.MethodHead, f.srv.URL+"/v1/traces/old/raw", nil)
	if h.code != http.StatusOK || len(h.body) != 0 || h.header.Get("Content-Disposition") == "" {
		t.Errorf("HEAD raw = %d, %d body bytes, headers %v", h.code, len(h.body), h.header)
	}
}

func TestTraceDelete(t *testing.T) {
	f := newTraceFixture(t)
	r := do(t, http.MethodDelete, f.srv.URL+"/v1/traces/mid", nil)
	if r.code != http.StatusOK {
		t.Fatalf("DELETE = %d %s", r.code, r.body)
	}
	for _, p := range []string{"/v1/traces/mid", "/v1/traces/mid/stats", "/v1/traces/mid/raw", "/perfetto/mid"} {
		r := get(t, f.srv.URL+p)
		if r.code != http.StatusNotFound {
			t.Errorf("GET %s after delete = %d %s, want 404", p, r.code, r.body)
		}
		wantJSONError(t, r)
	}
	r = do(t, http.MethodDelete, f.srv.URL+"/v1/traces/mid", nil)
	if r.code != http.StatusNotFound {
		t.Errorf("second DELETE = %d %s, want 404", r.code, r.body)
	}
	wantJSONError(t, r)
	if _, err := os.Stat(filepath.Join(f.dir, "traces", "mid.json")); !os.IsNotExist(err) {
		t.Errorf("mid.json still on disk: %v", err)
	}
	if n := len(f.store.List()); n != 2 {
		t.Errorf("%d traces left, want 2", n)
	}
}

func TestTracePathTraversal(t *testing.T) {
	f := newTraceFixture(t)
	long := strings.Repeat("a", 65)
	paths := []string{
		"/v1/traces/..%2F..%2Fetc%2Fpasswd/raw",
		"/v1/traces/..%2Fsecret/raw",
		"/v1/traces/..%2Fsecret",
		"/v1/traces/..%2Fsecret/stats",
		"/v1/traces/%2Fetc%2Fpasswd",
		"/v1/traces/%2Fetc%2Fpasswd/raw",
		"/v1/traces/%C3%A9",
		"/v1/traces/%C3%A9/raw",
		"/v1/traces/a.b/stats",
		"/v1/traces/a%00b/raw",
		"/v1/traces/%2E%2E/raw",
		"/v1/traces/" + long,
		"/v1/traces/" + long + "/raw",
		"/perfetto/..%2Fsecret",
		"/perfetto/" + long,
	}
	for _, p := range paths {
		r := get(t, f.srv.URL+p)
		if r.code != http.StatusBadRequest && r.code != http.StatusNotFound {
			t.Errorf("GET %s = %d %s, want 400 or 404", p, r.code, r.body)
		}
		if bytes.Contains(r.body, []byte(outsideSecret)) || bytes.Contains(r.body, []byte("root:")) {
			t.Errorf("GET %s served a file outside the store: %s", p, r.body)
		}
		wantJSONError(t, r)
	}
	// Deleting through a traversal removes nothing.
	for _, p := range []string{"/v1/traces/..%2Fsecret.json", "/v1/traces/..%2Fpasswd"} {
		r := do(t, http.MethodDelete, f.srv.URL+p, nil)
		if r.code != http.StatusBadRequest {
			t.Errorf("DELETE %s = %d %s, want 400", p, r.code, r.body)
		}
	}
	for _, name := range []string{"secret.json", "passwd"} {
		if _, err := os.Stat(filepath.Join(f.dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A 64-byte id is well-formed: unknown, not bad.
	r := get(t, f.srv.URL+"/v1/traces/"+long[:64])
	if r.code != http.StatusNotFound {
		t.Errorf("GET 64-byte id = %d %s, want 404", r.code, r.body)
	}
}

func TestTraceMethods(t *testing.T) {
	f := newTraceFixture(t)
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/traces", "GET, HEAD"},
		{http.MethodDelete, "/v1/traces", "GET, HEAD"},
		{http.MethodPost, "/v1/traces/new", "GET, HEAD, DELETE"},
		{http.MethodPut, "/v1/traces/new", "GET, HEAD, DELETE"},
		{http.MethodDelete, "/v1/traces/new/stats", "GET, HEAD"},
		{http.MethodPost, "/v1/traces/new/raw", "GET, HEAD"},
		{http.MethodDelete, "/v1/traces/new/raw", "GET, HEAD"},
		{http.MethodPost, "/perfetto/new", "GET, HEAD"},
	} {
		r := do(t, c.method, f.srv.URL+c.path, nil)
		if r.code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s = %d %s, want 405", c.method, c.path, r.code, r.body)
			continue
		}
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow = %q, want %q", c.method, c.path, got, c.allow)
		}
		wantJSONError(t, r)
	}
	if n := len(f.store.List()); n != 3 {
		t.Errorf("%d traces after refused methods, want 3", n)
	}
}

func TestPerfettoPage(t *testing.T) {
	f := newTraceFixture(t)
	r := get(t, f.srv.URL+"/perfetto/new")
	if r.code != http.StatusOK {
		t.Fatalf("GET /perfetto/new = %d %s", r.code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	page := string(r.body)
	for _, want := range []string{"new", "https://ui.perfetto.dev", `"PING"`, `"PONG"`, "perfetto:", "/v1/traces/new/raw", "30000", "arrayBuffer", "download"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script src") {
		t.Error("page loads an external script")
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	for _, p := range []string{"/perfetto/a.b", "/perfetto/%3Cscript%3E", "/perfetto/%22%3B%20alert(1)%2F%2F"} {
		r := get(t, f.srv.URL+p)
		if r.code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", p, r.code)
		}
		wantJSONError(t, r)
		if bytes.Contains(r.body, []byte("<script>")) {
			t.Errorf("GET %s echoes markup: %s", p, r.body)
		}
	}
	if r := get(t, f.srv.URL+"/perfetto/nope"); r.code != http.StatusNotFound {
		t.Errorf("GET /perfetto/nope = %d, want 404", r.code)
	}
}

// /spans answers the window a timeline draws, from the trace as its file
// holds it; bad parameters get a 400 naming them.
func TestTraceSpans(t *testing.T) {
	f := newTraceFixture(t)
	for id, tr := range f.traces {
		r := get(t, f.srv.URL+"/v1/traces/"+id+"/spans?px=800")
		if r.code != http.StatusOK {
			t.Fatalf("GET spans %s = %d %s", id, r.code, r.body)
		}
		var w trace.Window
		if err := json.Unmarshal(r.body, &w); err != nil {
			t.Fatal(err)
		}
		ranks := map[int]bool{}
		for _, s := range tr.Spans {
			ranks[s.Rank] = true
		}
		if w.Spans != len(tr.Spans) || w.Drawn != len(tr.Spans) || w.Px != 800 || len(w.Lanes) < len(ranks) || len(w.Names) == 0 {
			t.Errorf("%s: window of %d spans (%d drawn, px %d, %d lanes), want %d spans over %d ranks", id, w.Spans, w.Drawn, w.Px, len(w.Lanes), len(tr.Spans), len(ranks))
		}
		mid := get(t, fmt.Sprintf("%s/v1/traces/%s/spans?from=%v&to=%v&px=100", f.srv.URL, id, w.T1*0.4, w.T1*0.6))
		var z trace.Window
		if mid.code != http.StatusOK || json.Unmarshal(mid.body, &z) != nil || z.From != w.T1*0.4 || z.Drawn == 0 || z.Drawn >= w.Drawn {
			t.Errorf("%s: the middle fifth: %d %s", id, mid.code, mid.body[:min(len(mid.body), 200)])
		}
	}
	x1, err := f.store.View("mid")
	if err != nil {
		t.Fatal(err)
	}
	if x2, _ := f.store.View("mid"); x2 != x1 {
		t.Error("a second View loaded the trace again")
	}
	for q, want := range map[string]string{
		"px=0":          "px=0",
		"px=1.5":        "px=1.5",
		"px=99999":      "px=99999",
		"from=abc&to=2": `from="abc"`,
		"from=5&to=5":   "want from < to",
		"from=NaN&to=1": `from="NaN"`,
		"to=Inf":        `to="Inf"`,
		"from=3":        "want from < to",
	} {
		r := get(t, f.srv.URL+"/v1/traces/mid/spans?"+q)
		var e struct{ Error string }
		json.Unmarshal(r.body, &e)
		if r.code != http.StatusBadRequest || !strings.Contains(e.Error, want) {
			t.Errorf("?%s = %d %s, want 400 naming %s", q, r.code, r.body, want)
		}
	}
	if r := get(t, f.srv.URL+"/v1/traces/nope/spans"); r.code != http.StatusNotFound {
		t.Errorf("spans of a missing trace = %d %s", r.code, r.body)
	}
	if r := get(t, f.srv.URL+"/v1/traces/..%2Fsecret/spans"); r.code != http.StatusBadRequest {
		t.Errorf("spans of ../secret = %d %s", r.code, r.body)
	}
}
