package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/ident"

	"github.com/orrery-cluster/orrery/agent/state"
)

// PlaceRequest is the body of POST /instance: a model and, optionally,
// where. With none of Node, Nodes and Ranks the best placement is taken
// (the fewest nodes, most memory first, that fit).
type PlaceRequest struct {
	Model string `json:"model"`
	// Node places the whole model on one node.
	Node string `json:"node,omitempty"`
	// Nodes are the ranks' nodes in order; layers are split in
	// proportion to their available memory.
	Nodes []string `json:"nodes,omitempty"`
	// Ranks give every rank's node and layers [firstLayer, lastLayer).
	Ranks []state.ShardRange `json:"ranks,omitempty"`
	// IfNone refuses the placement (409) when the model has a live
	// instance anywhere: how loading on demand places only once.
	IfNone bool `json:"ifNone,omitempty"`
	// Duplicate places a second copy even when the model already runs
	// on the same set of nodes. Without it, such a placement answers with
	// the live instance (200, Existed) and loads nothing.
	Duplicate bool `json:"duplicate,omitempty"`
	// KeepAlive unloads the instance once it has been idle that long
	// ("5m", seconds; 0 after each request); nil or -1 pins it, as befits
	// a placement asked for explicitly.
	KeepAlive *KeepAlive `json:"keepAlive,omitempty"`
	// Parallelism splits the model as a pipeline (nil: the default) or as
	// a tensor-parallel group (see Parallelism).
	Parallelism *Parallelism `json:"parallelism,omitempty"`
	// DraftModel is a model on rank 0's node, with the model's vocabulary,
	// that rank 0 loads beside it to draft for speculative decoding
	// ("speculative": {"draft": DraftModel}).
	DraftModel string `json:"draftModel,omitempty"`
	// Speculative is the instance's default speculation: what requests
	// that name none speculate with ({"draft": "ngram" or DraftModel,
	// "max": K, "min": N, "p_min": P}; a request's {"draft": "none"} turns
	// it off).
	Speculative *runnerapi.Speculation `json:"speculative,omitempty"`
	// GPULayers is how many blocks of every rank go on its node's GPU:
	// "auto" (as many as fit), 0 (none) or a number (at most that many,
	// the last blocks first); nil: each node's default (its agent's
	// --gpu-layers). A node whose agent runs with --gpu off keeps its
	// ranks on the CPU.
	GPULayers *runnerapi.GPULayers `json:"gpuLayers,omitempty"`
}

// PlaceResponse answers POST /instance.
type PlaceResponse struct {
	Instance state.Instance `json:"instance"`
	// RunnerIDs are the instance's runners, to follow under
	// /state/runners/{id} while they load.
	RunnerIDs []string `json:"runnerIds"`
	// Existed is true when the model already ran on these nodes: the
	// answer is that instance (200), and nothing new was placed.
	Existed bool `json:"existed"`
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
	for _, id := range append(append([]string{req.Node}, req.Nodes...), rankNodes(req.Ranks)...) {
		if id == "" {
			continue
		}
		if err := ident.ValidNodeID(id); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if _, ok := s.Store.State().NodeIdentities[id]; !ok && id != s.NodeID {
			writeError(w, http.StatusNotFound, fmt.Sprintf("node %s is not a member of this cluster", id))
			return
		}
	}
	holder, err := s.Inference.PickNode(req.Model)
	if err != nil {
		writeInferenceError(w, err)
		return
	}
	if holder != s.NodeID {
		if forwarded {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("placement of %s reached %s, which lacks the model", req.Model, s.NodeID))
			return
		}
		b, _ := json.Marshal(req)
		s.forward(w, r, holder, "/instance", b)
		return
	}
	in, existed, err := s.Inference.Place(r.Context(), req)
	if err != nil {
		writeInferenceError(w, err)
		return
	}
	resp := PlaceResponse{Instance: in, Existed: existed}
	for _, rk := range in.Ranks {
		resp.RunnerIDs = append(resp.RunnerIDs, fmt.Sprintf("%s-%d", in.InstanceID, rk.Rank))
	}
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	writeJSON(w, status, resp)
}

func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if s.Inference == nil {
		writeError(w, http.StatusNotFound, "this node serves no models")
		return
	}
	id := r.PathValue("id")
	if err := ident.ValidInstanceID(id); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
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
	writeJSON(w, http.StatusOK, InstanceDeleted{Deleted: id})
}

// writeInferenceError writes an Inference error in the API's own shape.
func writeInferenceError(w http.ResponseWriter, err error) {
	status, _, _ := inferenceStatus(err)
	writeError(w, status, err.Error())
}

func rankNodes(rs []state.ShardRange) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.NodeID)
	}
	return out
}

// previews answers GET /instance/previews?model=…: for 1…N nodes (most
// available memory first), each rank's layers and expected memory, and
// whether it fits. The node that has the model answers.
func (s *Server) previews(w http.ResponseWriter, r *http.Request, forwarded bool) {
	if s.Inference == nil {
		writeError(w, http.StatusNotFound, "this node serves no models")
		return
	}
	m := r.URL.Query().Get("model")
	if m == "" {
		writeError(w, http.StatusBadRequest, "model: required (?model=ID)")
		return
	}
	var gpu *runnerapi.GPULayers
	if v := r.URL.Query().Get("gpuLayers"); v != "" {
		g, err := runnerapi.ParseGPULayers(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		gpu = &g
	}
	holder, err := s.Inference.PickNode(m)
	if err != nil {
		writeInferenceError(w, err)
		return
	}
	if holder != s.NodeID {
		if forwarded {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("previews of %s reached %s, which lacks the model", m, s.NodeID))
			return
		}
		s.forward(w, r, holder, "/instance/previews?"+r.URL.RawQuery, nil)
		return
	}
	p, err := s.Inference.Previews(m, gpu)
	if err != nil {
		writeInferenceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}
