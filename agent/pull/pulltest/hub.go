// Package pulltest serves the parts of the Hugging Face hub protocol a
// pull uses, in process, with faults to switch on: for tests of
// agent/pull and of the orrery command.
package pulltest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Hub serves the hub as the real one answers: the tree API with lfs.oid
// and sizes, the revision API, and /resolve/main/{file} answering 302 to
// a second server (the CDN), which serves Range requests with 206,
// Content-Range and ETag; the redirect carries X-Linked-ETag and
// X-Linked-Size. Set the faults before a pull starts.
type Hub struct {
	hub, cdn *httptest.Server
	files    map[string][]byte // repo/path → content
	// SHA is the sha256 advertised per repo/path (Add sets the real one).
	SHA       map[string]string
	manifests map[string][]byte // registry path → manifest

	mu sync.Mutex
	// Faults.
	CutAfter    int64 // drop the connection after this many body bytes (0: off)
	CutTimes    int   // how many responses to cut
	Busy        int   // answer 503 with Retry-After: 1 this many times
	IgnoreRange bool  // answer ranged requests with 200 and the whole file
	SlowPerSec  int64 // bytes per second per response (0: full speed)
	Redirects   int   // extra redirects before the CDN (endless: over 10)
	// FailRanges answers ranged requests that do not start at byte 0
	// with this status (0: off): the header reads, the tensors do not.
	FailRanges int
	// StallAfter sends this many body bytes, then nothing more, with the
	// connection held open (no FIN), for StallTimes responses: what a CDN
	// edge or a Wi-Fi link that went bad does.
	StallAfter int64
	StallTimes int
	// TrickleTimes responses (after the stalled ones) send one byte a
	// second until the client goes.
	TrickleTimes int

	// Served counts the file bytes the CDN sent; Requests its requests.
	Served, Requests atomic.Int64
}

// NewHub starts a hub and its CDN, closed when the test ends.
func NewHub(tb testing.TB) *Hub {
	h := &Hub{files: map[string][]byte{}, SHA: map[string]string{}}
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	tb.Cleanup(func() { h.hub.Close(); h.cdn.Close() })
	return h
}

// URL is the hub's endpoint (what HF_ENDPOINT would be).
func (h *Hub) URL() string { return h.hub.URL }

// Stall sets the stall faults (see StallAfter), safely while the hub
// serves.
func (h *Hub) Stall(after int64, stalls, trickles int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.StallAfter, h.StallTimes, h.TrickleTimes = after, stalls, trickles
}

// CDNURL is where the hub redirects file downloads.
func (h *Hub) CDNURL() string { return h.cdn.URL }

// Add puts a file in a repo; its advertised sha256 is the real one.
func (h *Hub) Add(repo, path string, content []byte) {
	sum := sha256.Sum256(content)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files[repo+"/"+path] = content
	h.SHA[repo+"/"+path] = hex.EncodeToString(sum[:])
}

// Commit is the commit the revision API names.
const Commit = "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c"

func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/api/models/") && strings.HasSuffix(p, "/tree/main"):
		repo := strings.TrimSuffix(strings.TrimPrefix(p, "/api/models/"), "/tree/main")
		var tree []map[string]any
		h.mu.Lock()
		defer h.mu.Unlock()
		for k, b := range h.files {
			if path, ok := strings.CutPrefix(k, repo+"/"); ok {
				tree = append(tree, map[string]any{"type": "file", "path": path, "size": len(b),
					"oid": "0123456789abcdef0123456789abcdef01234567",
					"lfs": map[string]any{"oid": h.SHA[k], "size": len(b), "pointerSize": 134}})
			}
		}
		if tree == nil {
			http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(tree)
	case strings.HasPrefix(p, "/api/models/") && strings.HasSuffix(p, "/revision/main"):
		json.NewEncoder(w).Encode(map[string]any{"sha": Commit})
	case strings.HasPrefix(p, "/v2/") && strings.Contains(p, "/manifests/"):
		h.mu.Lock()
		b, ok := h.manifests[p]
		h.mu.Unlock()
		if !ok {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
		w.Write(b)
	case strings.HasPrefix(p, "/v2/") && strings.Contains(p, "/blobs/"):
		_, digest, _ := strings.Cut(p, "/blobs/")
		http.Redirect(w, r, h.cdn.URL+"/blob/v2blobs/"+digest, http.StatusTemporaryRedirect)
	case strings.Contains(p, "/resolve/main/"):
		repo, file, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/resolve/main/")
		h.mu.Lock()
		b, ok := h.files[repo+"/"+file]
		sha, extra := h.SHA[repo+"/"+file], h.Redirects
		h.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		if n, _ := strconv.Atoi(r.URL.Query().Get("hop")); n < extra {
			http.Redirect(w, r, fmt.Sprintf("%s?hop=%d", p, n+1), http.StatusFound)
			return
		}
		w.Header().Set("X-Linked-ETag", `"`+sha+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(b)))
		w.Header().Set("X-Repo-Commit", Commit)
		http.Redirect(w, r, h.cdn.URL+"/blob/"+repo+"/"+file, http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

// bodyLen is the length of the response to r for a file of size bytes:
// its range's, or the whole file's.
func bodyLen(r *http.Request, size int, ignoreRange bool) int64 {
	var from, to int64
	if rng := r.Header.Get("Range"); rng != "" && !ignoreRange {
		if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &from, &to); err == nil && from <= to && to < int64(size) {
			return to - from + 1
		}
	}
	return int64(size)
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.Requests.Add(1)
	key := strings.TrimPrefix(r.URL.Path, "/blob/")
	h.mu.Lock()
	b, ok := h.files[key]
	sha := h.SHA[key]
	if !ok {
		h.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	if h.Busy > 0 {
		h.Busy--
		h.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	cut := int64(0)
	if h.CutTimes > 0 && h.CutAfter > 0 {
		h.CutTimes--
		cut = h.CutAfter
	}
	// A stall goes to a response longer than where it stalls: a short
	// one (the file's last chunk, when the chunks' requests race) would
	// use it up without stalling.
	stall, trickle := int64(0), false
	switch {
	case h.StallTimes > 0 && h.StallAfter > 0 && h.StallAfter < bodyLen(r, len(b), h.IgnoreRange):
		h.StallTimes--
		stall = h.StallAfter
	case h.TrickleTimes > 0:
		h.TrickleTimes--
		trickle = true
	}
	ignore, slow, failRanges := h.IgnoreRange, h.SlowPerSec, h.FailRanges
	h.mu.Unlock()
	if rng := r.Header.Get("Range"); failRanges != 0 && rng != "" && !strings.HasPrefix(rng, "bytes=0-") {
		http.Error(w, "ranges failed", failRanges)
		return
	}
	body, status := b, http.StatusOK
	w.Header().Set("ETag", `"`+sha+`"`)
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
		h.Served.Add(cut)
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
	if stall > 0 && stall < int64(len(body)) {
		w.Write(body[:stall])
		w.(http.Flusher).Flush()
		h.Served.Add(stall)
		<-r.Context().Done() // silent until the client gives up
		return
	}
	if trickle {
		for i := range body {
			w.Write(body[i : i+1])
			w.(http.Flusher).Flush()
			h.Served.Add(1)
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
		}
		return
	}
	if slow > 0 {
		for len(body) > 0 {
			n := min(int64(len(body)), slow/10)
			w.Write(body[:n])
			w.(http.Flusher).Flush()
			h.Served.Add(n)
			body = body[n:]
			time.Sleep(100 * time.Millisecond)
		}
		return
	}
	w.Write(body)
	h.Served.Add(int64(len(body)))
}

// AddOllama serves a model from the registry API on the hub's address:
// /v2/{namespace}/{name}/manifests/{tag} lists a config blob and the
// layers (media type → content), each at /v2/{namespace}/{name}/blobs/
// {digest}, which redirects to the CDN. It returns the manifest.
func (h *Hub) AddOllama(namespace, name, tag string, layers map[string][]byte) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	blob := func(b []byte) map[string]any {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		h.files["v2blobs/"+d] = b
		h.SHA["v2blobs/"+d] = hex.EncodeToString(sum[:])
		return map[string]any{"digest": d, "size": len(b)}
	}
	cfg := blob([]byte(`{"model_format":"gguf","model_family":"llama"}`))
	cfg["mediaType"] = "application/vnd.docker.container.image.v1+json"
	m := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "config": cfg}
	var ls []map[string]any
	for _, mt := range slices.Sorted(maps.Keys(layers)) {
		l := blob(layers[mt])
		l["mediaType"] = mt
		ls = append(ls, l)
	}
	m["layers"] = ls
	b, _ := json.Marshal(m)
	if h.manifests == nil {
		h.manifests = map[string][]byte{}
	}
	h.manifests["/v2/"+namespace+"/"+name+"/manifests/"+tag] = b
	return b
}

// SetManifest serves raw as a manifest (to test bad ones).
func (h *Hub) SetManifest(namespace, name, tag string, raw []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.manifests == nil {
		h.manifests = map[string][]byte{}
	}
	h.manifests["/v2/"+namespace+"/"+name+"/manifests/"+tag] = raw
}
