package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/ident"
)

// embed serves POST /embed: an EmbedRequest answered with one JSON
// EmbedResponse once every vector is pooled.
func (s *Server) embed(w http.ResponseWriter, r *http.Request) {
	var req runnerapi.EmbedRequest
	gen, sched, rank, ok := s.accept(w, r, "embedding", &req, &req.TraceID)
	if !ok {
		return
	}
	inputs, err := gen.PrepareEmbed(rank.Config(), &req)
	if err != nil {
		refuse(w, err)
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
		if errors.Is(err, runnerapi.ErrBadRequest) {
			code, kind = http.StatusBadRequest, "bad_request"
		}
		writeJSON(w, code, runnerapi.ErrorBody{Error: err.Error(), Kind: kind})
		return
	}
	for i, v := range res.Embeddings {
		res.Embeddings[i] = v.Truncate(req.Dimensions)
	}
	writeJSON(w, http.StatusOK, res)
}

// refuse answers a request its checks refused (Prepare, PrepareEmbed):
// 400, of kind prompt_too_long or bad_request.
func refuse(w http.ResponseWriter, err error) {
	kind := "bad_request"
	if errors.Is(err, runnerapi.ErrPromptTooLong) {
		kind = "prompt_too_long"
	}
	writeJSON(w, http.StatusBadRequest, runnerapi.ErrorBody{Error: err.Error(), Kind: kind})
}

// accept reads a request to rank 0 into body (what names it in errors;
// traceID points at its trace id) and returns the loaded model's
// generator, scheduler and rank; ok false when it answered the request
// (a bad body, a rank other than 0, a model not loaded).
func (s *Server) accept(w http.ResponseWriter, r *http.Request, what string, body any, traceID *string) (*Generator, *Scheduler, backend.Rank, bool) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(body); err != nil {
		writeJSON(w, http.StatusBadRequest, runnerapi.ErrorBody{Error: what + " body: " + err.Error(), Kind: "bad_request"})
		return nil, nil, nil, false
	}
	if *traceID != "" {
		if err := ident.ValidTraceID(*traceID); err != nil {
			writeJSON(w, http.StatusBadRequest, runnerapi.ErrorBody{Error: err.Error(), Kind: "bad_request"})
			return nil, nil, nil, false
		}
	}
	if s.cfg.Rank != 0 {
		writeJSON(w, http.StatusMisdirectedRequest, runnerapi.ErrorBody{Error: fmt.Sprintf("rank %d of %s; %ss go to rank 0", s.cfg.Rank, s.cfg.Shape, what), Kind: "not_ready"})
		return nil, nil, nil, false
	}
	s.mu.Lock()
	gen, sched, rank, h := s.gen, s.sched, s.rank, s.health
	s.mu.Unlock()
	if gen == nil || rank == nil {
		msg := "model is " + h.Status
		if h.Error != "" {
			msg += ": " + h.Error
		}
		writeJSON(w, http.StatusServiceUnavailable, runnerapi.ErrorBody{Error: msg, Kind: "not_ready"})
		return nil, nil, nil, false
	}
	return gen, sched, rank, true
}
