package pull

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeHub serves the parts of the Hugging Face hub protocol a pull uses,
// as the hub does: the tree API with lfs.oid and sizes, the revision API,
// and /resolve/main/{file} answering 302 to a second server (the CDN),
// which serves Range requests with 206, Content-Range, ETag, and the hub's
// X-Linked-ETag / X-Linked-Size on the redirect. Faults are switched on by
// the test.
type fakeHub struct {
	hub, cdn *httptest.Server
	files    map[string][]byte // repo/path → content
	sha      map[string]string // repo/path → sha256 advertised

	mu sync.Mutex
	// Faults.
	cutAfter   int64         // close the connection after this many bytes of a response (0: off)
	cutTimes   int           // how many responses to cut
	busy       int           // answer 503 with Retry-After: 1 this many times
	ignoreRng  bool          // answer 200 with the whole file to ranged requests
	slowPerSec int64         // bytes per second per response (0: full speed)
	served     atomic.Int64  // bytes of file content sent
	requests   atomic.Int64  // CDN requests
	redirects  int           // extra redirects before the CDN (endless: > 20)
	wait       time.Duration // seen Retry-After honoured: time of the last 503
	last503    time.Time
	gapAfter   []time.Duration
}

func newFakeHub(t *testing.T) *fakeHub {
	h := &fakeHub{files: map[string][]byte{}, sha: map[string]string{}}
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	t.Cleanup(func() { h.hub.Close(); h.cdn.Close() })
	return h
}

// add puts a file in a repo; its advertised sha256 is the real one.
func (h *fakeHub) add(repo, path string, content []byte) {
	sum := sha256.Sum256(content)
	h.files[repo+"/"+path] = content
	h.sha[repo+"/"+path] = hex.EncodeToString(sum[:])
}

func (h *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/api/models/") && strings.HasSuffix(p, "/tree/main"):
		repo := strings.TrimSuffix(strings.TrimPrefix(p, "/api/models/"), "/tree/main")
		var tree []map[string]any
		for k, b := range h.files {
			if path, ok := strings.CutPrefix(k, repo+"/"); ok {
				tree = append(tree, map[string]any{"type": "file", "path": path, "size": len(b),
					"oid": "0123456789abcdef0123456789abcdef01234567",
					"lfs": map[string]any{"oid": h.sha[k], "size": len(b), "pointerSize": 134}})
			}
		}
		if tree == nil {
			http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(tree)
	case strings.HasPrefix(p, "/api/models/") && strings.HasSuffix(p, "/revision/main"):
		json.NewEncoder(w).Encode(map[string]any{"sha": "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c"})
	case strings.Contains(p, "/resolve/main/"):
		repo, file, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/resolve/main/")
		b, ok := h.files[repo+"/"+file]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h.mu.Lock()
		extra := h.redirects
		h.mu.Unlock()
		if n, _ := strconv.Atoi(r.URL.Query().Get("hop")); n < extra {
			http.Redirect(w, r, fmt.Sprintf("%s?hop=%d", p, n+1), http.StatusFound)
			return
		}
		w.Header().Set("X-Linked-ETag", `"`+h.sha[repo+"/"+file]+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(b)))
		w.Header().Set("X-Repo-Commit", "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c")
		http.Redirect(w, r, h.cdn.URL+"/blob/"+repo+"/"+file, http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	key := strings.TrimPrefix(r.URL.Path, "/blob/")
	b, ok := h.files[key]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	if h.busy > 0 {
		h.busy--
		h.last503 = time.Now()
		h.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	cut := int64(0)
	if h.cutTimes > 0 && h.cutAfter > 0 {
		h.cutTimes--
		cut = h.cutAfter
	}
	ignore, slow := h.ignoreRng, h.slowPerSec
	if !h.last503.IsZero() {
		h.gapAfter = append(h.gapAfter, time.Since(h.last503))
		h.last503 = time.Time{}
	}
	h.mu.Unlock()
	body, status := b, http.StatusOK
	w.Header().Set("ETag", `"`+h.sha[key]+`"`)
	w.Header().Set("Accept-Ranges", "bytes")
	if rng := r.Header.Get("Range"); rng != "" && !ignore {
		var from, to int64
		if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &from, &to); err != nil || from > to || to >= int64(len(b)) {
			http.Error(w, "bad range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		body, status = b[from:to+1], http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(b)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if cut > 0 && cut < int64(len(body)) {
		w.Write(body[:cut])
		h.served.Add(cut)
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
	if slow > 0 {
		for len(body) > 0 {
			n := min(int64(len(body)), slow/10)
			w.Write(body[:n])
			w.(http.Flusher).Flush()
			h.served.Add(n)
			body = body[n:]
			time.Sleep(100 * time.Millisecond)
		}
		return
	}
	w.Write(body)
	h.served.Add(int64(len(body)))
}
