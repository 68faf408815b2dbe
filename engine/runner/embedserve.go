package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/ident"
)

// embed serves POST /embed: an EmbedRequest answered with one JSON
// EmbedResponse once every vector is pooled.
func (s *Server) embed(w http.ResponseWriter, r *http.Request) {
	var req EmbedRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "embed body: " + err.Error(), Kind: "bad_request"})
		return
	}
	if req.TraceID != "" {
		if err := ident.ValidTraceID(req.TraceID); err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorBody{Error: err.Error(), Kind: "bad_request"})
			return
		}
	}
	if s.cfg.Rank > 0 {
		writeJSON(w, http.StatusMisdirectedRequest, ErrorBody{Error: fmt.Sprintf("rank %d serves the pipeline; embeddings go to rank 0", s.cfg.Rank), Kind: "not_ready"})
		return
	}
	s.mu.Lock()
	gen, sched, rank, h := s.gen, s.sched, s.rank, s.health
	s.mu.Unlock()
	if gen == nil || rank == nil {
		msg := "model is " + h.Status
		if h.Error != "" {
			msg += ": " + h.Error
		}
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: msg, Kind: "not_ready"})
		return
	}
	inputs, err := gen.PrepareEmbed(rank.Config(), &req)
	if err != nil {
		kind := "bad_request"
		if errors.Is(err, ErrPromptTooLong) {
			kind = "prompt_too_long"
		}
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: err.Error(), Kind: kind})
		return
	}
	var rec *trace.Recorder
	if req.TraceID != "" {
		rec = trace.NewRecorder(0, s.cfg.Node, trace.Options{NodeName: s.cfg.NodeName})
	}
	res, err := sched.Embed(r.Context(), inputs, rec)
	res.Spans, res.Counters = rec.Drain(0), rec.DrainCounters()
	if err != nil {
		s.log.Warn("embedding failed", "err", err)
		code, kind := http.StatusInternalServerError, "runner"
		if errors.Is(err, ErrBadRequest) {
			code, kind = http.StatusBadRequest, "bad_request"
		}
		writeJSON(w, code, ErrorBody{Error: err.Error(), Kind: kind})
		return
	}
	for i, v := range res.Embeddings {
		res.Embeddings[i] = v.Truncate(req.Dimensions)
	}
	writeJSON(w, http.StatusOK, res)
}
