package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/cluster/ringbench"
	"github.com/orrery-cluster/orrery/engine/gpulib"
	"github.com/orrery-cluster/orrery/internal/ident"

	"github.com/orrery-cluster/orrery/agent/state"
)

// Limits.
const (
	// MaxBodyBytes caps every request body but the inference ones.
	MaxBodyBytes = 1 << 20
	// MaxInferenceBodyBytes caps a completion request's body (chat,
	// messages, generate): long conversations with tools run to
	// megabytes.
	MaxInferenceBodyBytes = 8 << 20
	// DefaultEventsLimit and MaxEventsLimit bound one /events response.
	DefaultEventsLimit = 1000
	MaxEventsLimit     = 10000
	// keepAliveEvery is how often an idle SSE stream gets a comment line, so
	// that proxies and browsers keep it open.
	keepAliveEvery = 15 * time.Second
)

// Server serves the API of one node.
type Server struct {
	NodeID  string
	Version string
	Store   *state.Store
	Logger  *slog.Logger
	// Cluster and Discovery, when set, serve /cluster and /state/discovery.
	Cluster   ClusterView
	Discovery DiscoveryView
	// GPU, when set, serves /state/gpu.
	GPU GPUView
	// Traces, when set, serves /v1/traces and /perfetto/{id}.
	Traces TraceStore
	// OpenURL opens a URL in the system browser, for
	// POST /v1/traces/{id}/open; nil answers 501 with the URL.
	OpenURL func(ctx context.Context, url string) error
	// Inference, when set, serves /v1/chat/completions, /v1/models and
	// /instance.
	Inference Inference
	// Pulls, when set, serves POST /models/pull, DELETE
	// /models/pull/{id} and DELETE /models (each for any node: forwarded).
	Pulls Pulls
	// TraceHome, when set, names the node that keeps the cluster's traces
	// (the master); trace reads on other nodes are forwarded there.
	TraceHome func() string
	// UI, when set, serves the web UI under /ui/ ("/" redirects there).
	UI http.Handler
	// Metrics, when set, serves GET /metrics and records served requests.
	Metrics *Metrics
	// AllowAnyHost turns off the Host check; set it only when the API is
	// deliberately bound to a non-loopback address.
	AllowAnyHost bool

	// running are the completions this node runs, for POST /v1/cancel.
	running running
}

// ClusterView is the node's view of the cluster.
type ClusterView interface {
	// ClusterStatus is this node's view of membership and replication.
	ClusterStatus() cluster.Status
	// HashAt is the state hash this node had at idx, while still kept.
	HashAt(idx int64) (string, bool)
	// RingBench passes size bytes around all members rounds times over
	// rank links and returns per-hop latency and throughput, and the trace
	// it left unless noTrace.
	RingBench(ctx context.Context, size, rounds int, noTrace bool) (RingBenchResult, error)
}

// RingBenchResult is the answer of POST /v1/cluster/ring-bench: the
// cluster's result plus where its trace went.
type RingBenchResult struct {
	ringbench.Result
	// TraceID names the run's trace; it is stored on TraceMaster (the
	// master when the run ended), and already saved when TraceSaved.
	TraceID     string `json:"traceId,omitempty"`
	TraceMaster string `json:"traceMaster,omitempty"`
	TraceSaved  bool   `json:"traceSaved"`
}

// DiscoveryView explains what discovery found, and why not.
type DiscoveryView interface {
	DiscoveryReport() discovery.Report
}

// GPUView says what the node has for computing on a GPU, and what keeps
// it from doing so (orrery doctor shows it).
type GPUView interface {
	GPUReport() gpulib.Report
}

// PeerHandler serves the requests other nodes forward here over
// authenticated stream links: completions for instances on this node and
// placement on it, model pulls and deletions. They are answered here,
// never forwarded again.
func (s *Server) PeerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/chat/completions", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.chatCompletions(w, r, true) }))
	mux.Handle("/v1/completions", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.completions(w, r, true) }))
	mux.Handle("/v1/messages", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.anthropicMessages(w, r, true) }))
	mux.Handle("/api/chat", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.ollamaChat(w, r, true) }))
	mux.Handle("/api/generate", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.ollamaGenerate(w, r, true) }))
	mux.Handle("/v1/embeddings", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.openAIEmbeddings(w, r, true) }))
	mux.Handle("/api/embed", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.ollamaEmbed(w, r, true) }))
	mux.Handle("/api/embeddings", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.ollamaEmbed(w, r, true) }))
	mux.Handle("/v1/cancel/{id}", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.cancel(w, r, true) }))
	mux.Handle("/tokenize", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.tokenize(w, r, true) }))
	mux.Handle("/detokenize", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.detokenize(w, r, true) }))
	mux.Handle("/instance", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.placeInstance(w, r, true) }))
	mux.Handle("/instance/{id}", allow(func(w http.ResponseWriter, r *http.Request) { s.deleteInstance(w, r, true) }, http.MethodDelete))
	mux.Handle("/instance/previews", onlyGET(func(w http.ResponseWriter, r *http.Request) { s.previews(w, r, true) }))
	mux.Handle("/models", allow(func(w http.ResponseWriter, r *http.Request) { s.deleteModel(w, r, true) }, http.MethodDelete))
	mux.Handle("/models/pull", onlyPOST(func(w http.ResponseWriter, r *http.Request) { s.pullModel(w, r, true) }))
	mux.Handle("/models/pull/{id}", allow(func(w http.ResponseWriter, r *http.Request) { s.cancelPull(w, r, true) }, http.MethodDelete))
	// Trace reads forwarded by nodes that do not keep the traces.
	mux.Handle("/v1/traces", onlyGET(s.traceList))
	mux.Handle("/v1/traces/{id}", allow(s.traceItem, http.MethodGet, http.MethodHead, http.MethodDelete))
	mux.Handle("/v1/traces/{id}/stats", onlyGET(s.traceStats))
	mux.Handle("/v1/traces/{id}/raw", onlyGET(s.traceRaw))
	mux.Handle("/v1/traces/{id}/spans", onlyGET(s.traceSpans))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such peer endpoint: %s", r.URL.Path))
	})
	return limitBody(mux)
}

// onlyGET answers 405 with an Allow header to anything but GET and HEAD.
func onlyGET(h http.HandlerFunc) http.Handler { return allow(h, http.MethodGet, http.MethodHead) }

// onlyPOST answers 405 with an Allow header to anything but POST.
func onlyPOST(h http.HandlerFunc) http.Handler { return allow(h, http.MethodPost) }

func allow(h http.HandlerFunc, methods ...string) http.Handler {
	allowed := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			w.Header().Set("Allow", allowed)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
			return
		}
		h(w, r)
	})
}

func limitBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, fail := int64(MaxBodyBytes), func(msg string) { writeError(w, http.StatusRequestEntityTooLarge, msg) }
		if p := inferenceProtocol(r.URL.Path); p != nil {
			// A conversation is larger than other bodies; too large, it
			// is a 400 in the protocol's own error shape.
			limit, fail = MaxInferenceBodyBytes, func(msg string) { p(w, http.StatusBadRequest, "invalid_request_error", "request_too_large", msg) }
		}
		if r.ContentLength > limit {
			fail(fmt.Sprintf("request body is %d bytes, limit %d", r.ContentLength, limit))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		h.ServeHTTP(w, r)
	})
}

// inferenceProtocol is the error writer of an inference path's protocol
// (OpenAI's, Anthropic's or Ollama's), or nil for other paths.
func inferenceProtocol(path string) func(w http.ResponseWriter, status int, typ, code, msg string) {
	switch {
	case path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/embeddings":
		return openAIError
	case path == "/v1/messages":
		return func(w http.ResponseWriter, status int, typ, _, msg string) { anthropicError(w, status, typ, msg) }
	case path == "/api/chat" || path == "/api/generate" || path == "/api/embed" || path == "/api/embeddings":
		return func(w http.ResponseWriter, status int, _, _, msg string) { ollamaError(w, status, msg) }
	}
	return nil
}

// loopbackHostOnly refuses requests whose Host is not a loopback name, which
// is what a DNS-rebinding page would send.
func loopbackHostOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackName(r.Host) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("host %q not allowed: the API answers loopback names only", r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) nodeID(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.NodeID)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	st := s.Store.State()
	writeJSON(w, http.StatusOK, HealthResponse{
		Status:              "ok",
		NodeID:              s.NodeID,
		Version:             s.Version,
		LastEventAppliedIdx: st.LastEventAppliedIdx,
	})
}

func (s *Server) stateAll(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Store.State())
}

func (s *Server) statePath(w http.ResponseWriter, r *http.Request) {
	segs, err := state.ParsePath(r.PathValue("path"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	raw, err := state.Lookup(s.Store.State(), segs)
	switch {
	case errors.Is(err, state.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeRaw(w, http.StatusOK, raw)
}

// eventsPage is the /events response.
type eventsPage struct {
	Events []state.Indexed `json:"events"`
	// Next is the idx to ask for next (since=Next).
	Next int64 `json:"next"`
	// Truncated is set when events from since on are no longer kept; the
	// page then starts at First. A client that must not miss events
	// refetches /state and continues from its lastEventAppliedIdx+1.
	Truncated bool   `json:"truncated,omitempty"`
	First     *int64 `json:"first,omitempty"`
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := intParam(q.Get("since"), 0)
	if err != nil || since < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("since: want an integer ≥ 0, got %q", q.Get("since")))
		return
	}
	limit, err := intParam(q.Get("limit"), DefaultEventsLimit)
	if err != nil || limit < 1 || limit > MaxEventsLimit {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("limit: want 1..%d, got %q", MaxEventsLimit, q.Get("limit")))
		return
	}
	log := s.Store.Log()
	page := eventsPage{}
	evs, err := log.Since(since, int(limit))
	if errors.Is(err, state.ErrCompacted) {
		// The events asked for are gone (retention, or this node took a
		// snapshot from the master): serve what is kept, and say so.
		first := log.First()
		page.Truncated, page.First = true, &first
		since = first
		evs, err = log.Since(first, int(limit))
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if evs == nil {
		evs = []state.Indexed{}
	}
	page.Events, page.Next = evs, since
	if len(evs) > 0 {
		page.Next = evs[len(evs)-1].Idx + 1
	}
	writeJSON(w, http.StatusOK, page)
}

// eventStream sends indexed events as SSE: "id: N" and "data: {…}". It starts
// at ?since=N, else after Last-Event-ID, else with the next new event.
func (s *Server) eventStream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming not supported by this connection")
		return
	}
	log := s.Store.Log()
	next := log.Next()
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since: want an integer ≥ 0, got %q", v))
			return
		}
		next = n
	} else if v := r.Header.Get("Last-Event-ID"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			next = n + 1
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return // headers only; never hold a HEAD open as a stream
	}
	fmt.Fprint(w, ": orrery event stream\n\n")
	flusher.Flush()

	ctx := r.Context()
	for {
		evs, err := log.Since(next, 256)
		if err != nil {
			// The client fell behind retention: say so and end; it must
			// resync from /state.
			b, _ := json.Marshal(map[string]string{"error": err.Error()})
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", b)
			flusher.Flush()
			return
		}
		for _, ie := range evs {
			b, err := json.Marshal(ie)
			if err != nil {
				s.Logger.Error("marshal event", "idx", ie.Idx, "err", err)
				eb, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("event %d cannot be encoded: %v", ie.Idx, err)})
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", eb)
				flusher.Flush()
				return
			}
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ie.Idx, b); err != nil {
				return
			}
			next = ie.Idx + 1
		}
		if len(evs) > 0 {
			flusher.Flush()
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, keepAliveEvery)
		err = log.Wait(wctx, next)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil { // keep-alive timeout
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

func (s *Server) memoryHistory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ident.ValidNodeID(id); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	samples, ok := s.Store.History().Get(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no memory history for node %q", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodeId": id, "samples": samples})
}

func (s *Server) systemHistory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ident.ValidNodeID(id); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	samples, ok := s.Store.System().Get(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no system history for node %q", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodeId": id, "samples": samples})
}

func (s *Server) discovery(w http.ResponseWriter, r *http.Request) {
	if s.Discovery == nil {
		writeError(w, http.StatusNotFound, "discovery is not running on this node")
		return
	}
	writeJSON(w, http.StatusOK, s.Discovery.DiscoveryReport())
}

func (s *Server) gpu(w http.ResponseWriter, r *http.Request) {
	if s.GPU == nil {
		writeError(w, http.StatusNotFound, "this node reports no GPU view")
		return
	}
	writeJSON(w, http.StatusOK, s.GPU.GPUReport())
}

func (s *Server) cluster(w http.ResponseWriter, r *http.Request) {
	if s.Cluster == nil {
		writeError(w, http.StatusNotFound, "this node runs without a cluster")
		return
	}
	writeJSON(w, http.StatusOK, s.Cluster.ClusterStatus())
}

func (s *Server) clusterHash(w http.ResponseWriter, r *http.Request) {
	idx, err := strconv.ParseInt(r.PathValue("idx"), 10, 64)
	if err != nil || idx < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("idx: want an integer ≥ 0, got %q", r.PathValue("idx")))
		return
	}
	if s.Cluster == nil {
		writeError(w, http.StatusNotFound, "this node runs without a cluster")
		return
	}
	h, ok := s.Cluster.HashAt(idx)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no state hash kept for idx %d", idx))
		return
	}
	writeJSON(w, http.StatusOK, ClusterHash{Idx: idx, StateHash: h})
}

// RingBenchRequest is the body of POST /v1/cluster/ring-bench.
type RingBenchRequest struct {
	SizeBytes int `json:"sizeBytes"`
	Rounds    int `json:"rounds"`
	// NoTrace runs the benchmark without tracing (to measure tracing's
	// overhead); by default every run is traced.
	NoTrace bool `json:"noTrace"`
}

// Ring benchmark defaults: 16 MiB, 5 rounds.
const (
	DefaultRingSize   = 16 << 20
	DefaultRingRounds = 5
)

func (s *Server) ringBench(w http.ResponseWriter, r *http.Request) {
	if s.Cluster == nil {
		writeError(w, http.StatusNotFound, "this node runs without a cluster")
		return
	}
	if !requireJSON(w, r, "ring-bench") {
		return
	}
	req := RingBenchRequest{SizeBytes: DefaultRingSize, Rounds: DefaultRingRounds}
	if r.ContentLength != 0 {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "ring-bench body: "+err.Error())
			return
		}
	}
	res, err := s.Cluster.RingBench(r.Context(), req.SizeBytes, req.Rounds, req.NoTrace)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// requireJSON answers 415 unless the request says its body is JSON. A JSON
// content type makes a browser preflight a cross-site request, which this
// API never approves: no web page can make it act.
func requireJSON(w http.ResponseWriter, r *http.Request, what string) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, what+": want Content-Type: application/json")
		return false
	}
	return true
}

func intParam(v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	writeRaw(w, code, b)
}

func writeRaw(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	writeRaw(w, code, b)
}
