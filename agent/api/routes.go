package api

import (
	"fmt"
	"net/http"
)

// Route is one route of the API: its pattern and the methods it takes.
type Route struct {
	Pattern string
	Methods []string
}

type route struct {
	Route
	h http.HandlerFunc
}

// routes lists the API's routes; the optional parts (Metrics, UI) only
// when set.
func (s *Server) routes() []route {
	r := func(pattern string, h http.HandlerFunc, methods ...string) route {
		return route{Route{pattern, methods}, h}
	}
	local := func(f func(http.ResponseWriter, *http.Request, bool)) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) { f(w, req, false) }
	}
	rs := []route{
		r("/node_id", s.nodeID, http.MethodGet, http.MethodHead),
		r("/healthz", s.healthz, http.MethodGet, http.MethodHead),
		r("/state", s.stateAll, http.MethodGet, http.MethodHead),
		r("/state/{path...}", s.statePath, http.MethodGet, http.MethodHead),
		r("/events", s.events, http.MethodGet, http.MethodHead),
		r("/events/stream", s.eventStream, http.MethodGet, http.MethodHead),
		r("/history/memory/{id}", s.memoryHistory, http.MethodGet, http.MethodHead),
		r("/history/system/{id}", s.systemHistory, http.MethodGet, http.MethodHead),
		r("/state/discovery", s.discovery, http.MethodGet, http.MethodHead),
		r("/state/gpu", s.gpu, http.MethodGet, http.MethodHead),
		r("/cluster", s.cluster, http.MethodGet, http.MethodHead),
		r("/cluster/hash/{idx}", s.clusterHash, http.MethodGet, http.MethodHead),
		r("/v1/cluster/ring-bench", s.ringBench, http.MethodPost),
		r("/v1/traces", s.atTraceHome(s.traceList), http.MethodGet, http.MethodHead),
		r("/v1/traces/{id}", s.atTraceHome(s.traceItem), http.MethodGet, http.MethodHead, http.MethodDelete),
		r("/v1/traces/{id}/stats", s.atTraceHome(s.traceStats), http.MethodGet, http.MethodHead),
		r("/v1/traces/{id}/raw", s.atTraceHome(s.traceRaw), http.MethodGet, http.MethodHead),
		r("/v1/traces/{id}/spans", s.atTraceHome(s.traceSpans), http.MethodGet, http.MethodHead),
		r("/v1/traces/{id}/open", s.traceOpen, http.MethodPost),
		r("/perfetto/{id}", s.perfettoPage, http.MethodGet, http.MethodHead),
		r("/v1/chat/completions", local(s.chatCompletions), http.MethodPost),
		r("/v1/completions", local(s.completions), http.MethodPost),
		r("/v1/cancel/{id}", local(s.cancel), http.MethodPost),
		r("/tokenize", local(s.tokenize), http.MethodPost),
		r("/detokenize", local(s.detokenize), http.MethodPost),
		r("/v1/models", s.models, http.MethodGet, http.MethodHead),
		r("/v1/messages", local(s.anthropicMessages), http.MethodPost),
		// Ollama's API.
		r("/api/chat", local(s.ollamaChat), http.MethodPost),
		r("/api/generate", local(s.ollamaGenerate), http.MethodPost),
		r("/api/tags", s.ollamaTags, http.MethodGet, http.MethodHead),
		r("/api/ps", s.ollamaPS, http.MethodGet, http.MethodHead),
		r("/api/show", s.ollamaShow, http.MethodPost),
		r("/api/version", s.ollamaVersion, http.MethodGet, http.MethodHead),
		r("/api/pull", s.ollamaPull, http.MethodPost),
		r("/api/delete", s.ollamaDelete, http.MethodDelete),
		r("/v1/embeddings", local(s.openAIEmbeddings), http.MethodPost),
		r("/api/embed", local(s.ollamaEmbed), http.MethodPost),
		r("/api/embeddings", local(s.ollamaEmbed), http.MethodPost),
		r("/instance", local(s.placeInstance), http.MethodPost),
		r("/instance/{id}", local(s.deleteInstance), http.MethodDelete),
		r("/instance/previews", local(s.previews), http.MethodGet, http.MethodHead),
		r("/models", local(s.deleteModel), http.MethodDelete),
		r("/models/pull", local(s.pullModel), http.MethodPost),
		r("/models/pull/{id}", local(s.cancelPull), http.MethodDelete),
	}
	if s.Metrics != nil {
		rs = append(rs, r("/metrics", s.Metrics.Handler().ServeHTTP, http.MethodGet, http.MethodHead))
	}
	if s.UI != nil {
		rs = append(rs, r("/ui/", http.StripPrefix("/ui", s.UI).ServeHTTP, http.MethodGet, http.MethodHead),
			r("/{$}", func(w http.ResponseWriter, req *http.Request) { http.Redirect(w, req, "/ui/", http.StatusFound) }, http.MethodGet, http.MethodHead))
	}
	return rs
}

// Routes lists the API's routes, as Handler serves them.
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.routes() {
		out = append(out, r.Route)
	}
	return out
}

// Handler returns the API's root handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.routes() {
		mux.Handle(r.Pattern, allow(r.h, r.Methods...))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s", r.URL.Path))
	})
	var h http.Handler = mux
	h = limitBody(h)
	if !s.AllowAnyHost {
		h = loopbackHostOnly(h)
	}
	return h
}
