package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/ident"
)

// Pulls runs this node's model pulls (agent/pull).
type Pulls interface {
	// Pull starts pulling ref (hf.co/{org}/{repo}[:{quant}]) into this
	// node's model stores and returns the download, whose progress then
	// shows under /state/downloads/{id}.
	Pull(ref string) (state.Download, error)
	// CancelPull stops a running pull of this node.
	CancelPull(id string) error
	// DeleteModel removes a model from this node's stores; a model an
	// instance uses here is refused (ErrConflict).
	DeleteModel(id string) (ModelDeleted, error)
}

// ModelDeleted answers DELETE /models.
type ModelDeleted struct {
	Model string `json:"model"`
	Node  string `json:"node"`
	// Files are the paths removed; FreedBytes the data they held.
	Files      []string `json:"files"`
	FreedBytes int64    `json:"freedBytes"`
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
	// Node pulls onto another node of the cluster (default: this one).
	Node string `json:"node,omitempty"`
}

func (s *Server) pullModel(w http.ResponseWriter, r *http.Request, forwarded bool) {
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
	if s.elsewhere(w, r, req.Node, forwarded, "/models/pull", body) {
		return
	}
	d, err := s.Pulls.Pull(req.Model)
	if err != nil {
		writePullError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, d)
}

func (s *Server) cancelPull(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if s.Pulls == nil {
		writeError(w, http.StatusNotFound, "this node pulls no models")
		return
	}
	id := r.PathValue("id")
	if d, ok := s.Store.State().Downloads[id]; ok && s.elsewhere(w, r, d.NodeID, forwarded, "/models/pull/"+url.PathEscape(id), nil) {
		return
	}
	if err := s.Pulls.CancelPull(id); err != nil {
		writePullError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"canceled": id})
}

func writePullError(w http.ResponseWriter, err error) {
	code, msg := pullStatus(err)
	writeError(w, code, msg)
}

// deleteModel answers DELETE /models?model={id}[&node={node}].
func (s *Server) deleteModel(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if s.Pulls == nil {
		writeError(w, http.StatusNotFound, "this node manages no models")
		return
	}
	id := r.URL.Query().Get("model")
	if id == "" {
		writeError(w, http.StatusBadRequest, `"model" is required: DELETE /models?model={id}[&node={node}]`)
		return
	}
	if s.elsewhere(w, r, r.URL.Query().Get("node"), forwarded, "/models?"+url.Values{"model": {id}}.Encode(), nil) {
		return
	}
	d, err := s.Pulls.DeleteModel(id)
	if err != nil {
		writePullError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// elsewhere forwards a request meant for another node to it, or answers
// why it cannot; it reports whether the request was answered.
func (s *Server) elsewhere(w http.ResponseWriter, r *http.Request, node string, forwarded bool, path string, body []byte) bool {
	if node == "" || node == s.NodeID {
		return false
	}
	if err := ident.ValidNodeID(node); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return true
	}
	if _, ok := s.Store.State().NodeIdentities[node]; !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("node %s is not a member of this cluster", node))
		return true
	}
	if forwarded || s.Inference == nil {
		writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("a request for node %s reached %s", node, s.NodeID))
		return true
	}
	s.forward(w, r, node, path, body)
	return true
}
