package frontend

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

func TestHandler(t *testing.T) {
	h := handler(fstest.MapFS{
		"index.html":         {Data: []byte("<title>Orrery</title>index")},
		"assets/index-1.js":  {Data: []byte("console.log(1)")},
		"assets/index-1.css": {Data: []byte("body{}")},
	})
	for _, tc := range []struct {
		path, want, cache string
	}{
		{"/", "index", "no-cache"},
		{"/index.html", "index", "no-cache"},
		{"/traces/x", "index", "no-cache"}, // not a file: the app
		{"/assets/index-1.js", "console.log(1)", "immutable"},
		{"/assets/", "index", "no-cache"},          // a directory is never listed
		{"/../../etc/passwd", "index", "no-cache"}, // cleaned, stays inside
	} {
		w := get(t, h, http.MethodGet, tc.path)
		if w.Code != 200 || !strings.Contains(w.Body.String(), tc.want) || !strings.Contains(w.Header().Get("Cache-Control"), tc.cache) {
			t.Errorf("GET %s: %d %q cache %q, want %q and %q", tc.path, w.Code, w.Body.String(), w.Header().Get("Cache-Control"), tc.want, tc.cache)
		}
	}
	if w := get(t, h, http.MethodGet, "/assets/index-1.js"); !strings.HasPrefix(w.Header().Get("Content-Type"), "text/javascript") {
		t.Errorf("JS served as %q", w.Header().Get("Content-Type"))
	}
	if w := get(t, h, http.MethodPost, "/"); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", w.Code, w.Header().Get("Allow"))
	}
}

func TestHandlerNotBuilt(t *testing.T) {
	h := handler(fstest.MapFS{".gitkeep": {}})
	w := get(t, h, http.MethodGet, "/")
	if w.Code != 200 || !strings.Contains(w.Body.String(), "make ui") {
		t.Errorf("unbuilt UI: %d %q, want the page that says how to build it", w.Code, w.Body.String())
	}
}
