package api

import (
	"fmt"
	"io"
	"net/http"
)

// Traces are merged and kept on the master. A node that is not the master
// answers the trace endpoints from the master's store, over the peer link,
// so that the UI of any node shows the cluster's traces.

// traceHome is the node whose store answers trace requests: "" for this
// node.
func (s *Server) traceHome() string {
	if s.TraceHome == nil || s.Inference == nil {
		return ""
	}
	home := s.TraceHome()
	if home == s.NodeID {
		return ""
	}
	return home
}

// atTraceHome serves h here when this node keeps the traces, and forwards
// the request to the node that does otherwise.
func (s *Server) atTraceHome(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		home := s.traceHome()
		if home == "" {
			h(w, r)
			return
		}
		s.forwardTrace(w, r, home)
	}
}

// forwardedTraceHeaders are the answer's headers passed back.
var forwardedTraceHeaders = []string{"Content-Type", "Content-Length", "Content-Disposition", "Cache-Control",
	"Last-Modified", "ETag", "Accept-Ranges", "Content-Range", "X-Content-Type-Options"}

func (s *Server) forwardTrace(w http.ResponseWriter, r *http.Request, home string) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+home+r.URL.RequestURI(), nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "forward trace request: "+err.Error())
		return
	}
	for _, h := range []string{"Range", "If-Modified-Since", "If-None-Match", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := s.Inference.Peer().Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("traces are kept on the master %s, which does not answer: %v", home, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range forwardedTraceHeaders {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set(NodeHeader, home)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}
