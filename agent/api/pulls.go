package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/orrery-cluster/orrery/agent/state"
)

// Pulls runs this node's model pulls (agent/pull).
type Pulls interface {
	// Pull starts pulling ref (hf.co/{org}/{repo}[:{quant}]) into this
	// node's model stores and returns the download, whose progress then
	// shows under /state/downloads/{id}.
	Pull(ref string) (state.Download, error)
	// CancelPull stops a running pull of this node.
	CancelPull(id string) error
}

// Errors a Pulls returns, for the status they map to.
var (
	ErrPullRef     = errors.New("bad model reference")  // 400
	ErrPullBusy    = errors.New("too many pulls")       // 429
	ErrPullOffline = errors.New("pulls are turned off") // 409
	ErrNoPull      = errors.New("no such pull")         // 404
)

// PullRequest is the body of POST /models/pull.
type PullRequest struct {
	Model string `json:"model"`
}

func (s *Server) pullModel(w http.ResponseWriter, r *http.Request) {
	if s.Pulls == nil {
		writeError(w, http.StatusNotFound, "this node pulls no models")
		return
	}
	if !requireJSON(w, r, "pull") {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var req PullRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "pull body: "+err.Error())
		return
	}
	if req.Model == "" {
		writeError(w, http.StatusBadRequest, `pull body: "model" is required, e.g. "hf.co/org/repo:Q4_K_M"`)
		return
	}
	d, err := s.Pulls.Pull(req.Model)
	if err != nil {
		writePullError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, d)
}

func (s *Server) cancelPull(w http.ResponseWriter, r *http.Request) {
	if s.Pulls == nil {
		writeError(w, http.StatusNotFound, "this node pulls no models")
		return
	}
	id := r.PathValue("id")
	if err := s.Pulls.CancelPull(id); err != nil {
		writePullError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"canceled": id})
}

func writePullError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrPullRef):
		code = http.StatusBadRequest
	case errors.Is(err, ErrPullBusy):
		code = http.StatusTooManyRequests
	case errors.Is(err, ErrPullOffline):
		code = http.StatusConflict
	case errors.Is(err, ErrNoPull):
		code = http.StatusNotFound
	}
	writeError(w, code, err.Error())
}
