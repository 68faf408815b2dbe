package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/orrery-cluster/orrery/agent/state"
)

// PlaceRequest is the body of POST /instance.
type PlaceRequest struct {
	Model string `json:"model"`
	// Node is where to place it; empty picks a node that has the model
	// (this one first).
	Node string `json:"node,omitempty"`
}

// PlaceResponse answers POST /instance.
type PlaceResponse struct {
	Instance state.Instance `json:"instance"`
	// RunnerIDs are the instance's runners, to follow under
	// /state/runners/{id} while they load.
	RunnerIDs []string `json:"runnerIds"`
}

func (s *Server) placeInstance(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if s.Inference == nil {
		writeError(w, http.StatusNotFound, "this node serves no models")
		return
	}
	if !requireJSON(w, r, "instance") {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var req PlaceRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "instance body: "+err.Error())
		return
	}
	if req.Model == "" {
		writeError(w, http.StatusBadRequest, `instance body: "model" is required`)
		return
	}
	if req.Node == "" {
		if req.Node, err = s.Inference.PickNode(req.Model); err != nil {
			writeInferenceError(w, err)
			return
		}
	} else if err := state.ValidNodeID(req.Node); err != nil {
		writeError(w, http.StatusBadRequest, "node: "+err.Error())
		return
	}
	if req.Node != s.NodeID {
		if forwarded {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("placement for %s reached %s", req.Node, s.NodeID))
			return
		}
		if _, ok := s.Store.State().NodeIdentities[req.Node]; !ok {
			writeError(w, http.StatusNotFound, fmt.Sprintf("node %s is not a member of this cluster", req.Node))
			return
		}
		b, _ := json.Marshal(req)
		s.forward(w, r, req.Node, "/instance", b)
		return
	}
	in, err := s.Inference.Place(r.Context(), req.Model)
	if err != nil {
		writeInferenceError(w, err)
		return
	}
	resp := PlaceResponse{Instance: in}
	for _, rk := range in.Ranks {
		resp.RunnerIDs = append(resp.RunnerIDs, fmt.Sprintf("%s-%d", in.InstanceID, rk.Rank))
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if s.Inference == nil {
		writeError(w, http.StatusNotFound, "this node serves no models")
		return
	}
	id := r.PathValue("id")
	if err := state.ValidNodeID(id); err != nil {
		writeError(w, http.StatusBadRequest, "instance id: "+err.Error())
		return
	}
	in, ok := s.Store.State().Instances[id]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no instance %q", id))
		return
	}
	if in.NodeID != s.NodeID {
		if forwarded {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("instance %s is on %s", id, in.NodeID))
			return
		}
		s.forward(w, r, in.NodeID, "/instance/"+id, nil)
		return
	}
	if err := s.Inference.Delete(r.Context(), id); err != nil {
		writeInferenceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
}

// writeInferenceError writes an Inference error in the API's own shape.
func writeInferenceError(w http.ResponseWriter, err error) {
	status, _, _ := inferenceStatus(err)
	writeError(w, status, err.Error())
}
