package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// ErrCancelled is the cause of a completion stopped by POST
// /v1/cancel/{id}: its stream ends with an error event of code
// "cancelled", an unstreamed one is 499.
var ErrCancelled = errors.New("cancelled")

// running maps the ids of the completions this node runs (chatcmpl-…,
// cmpl-…) to their cancellation. The zero value is ready to use.
type running struct {
	mu sync.Mutex
	m  map[string]context.CancelCauseFunc
}

// track registers completion id for cancellation: its requests run under
// the returned context; done unregisters it.
func (rn *running) track(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	rn.mu.Lock()
	if rn.m == nil {
		rn.m = map[string]context.CancelCauseFunc{}
	}
	rn.m[id] = cancel
	rn.mu.Unlock()
	return ctx, func() {
		rn.mu.Lock()
		delete(rn.m, id)
		rn.mu.Unlock()
		cancel(nil)
	}
}

// cancel stops completion id, if it runs here.
func (rn *running) cancel(id string) bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	f, ok := rn.m[id]
	if ok {
		f(ErrCancelled)
	}
	return ok
}

// cancelled is err, or, when ctx was cancelled by POST /v1/cancel/{id},
// ErrCancelled saying so.
func cancelled(ctx context.Context, id string, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), ErrCancelled) {
		return fmt.Errorf("%w: %s was cancelled by POST /v1/cancel/%s", ErrCancelled, id, id)
	}
	return err
}

// cancel answers POST /v1/cancel/{id}: the completion with that id (the
// id of its answer or of its stream's chunks) stops, on every rank, and
// frees its runner. A node that does not run it asks the others.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, forwarded bool) {
	id := r.PathValue("id")
	if err := ident.CompletionID(id).Valid(); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", err.Error())
		return
	}
	if s.running.cancel(id) {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "cancelled": true})
		return
	}
	if !forwarded && s.Inference != nil && s.Store != nil {
		var nodes []string
		for n := range s.Store.State().NodeIdentities {
			if n != s.NodeID {
				nodes = append(nodes, n)
			}
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://"+n+"/v1/cancel/"+id, nil)
			if err != nil {
				continue
			}
			resp, err := s.Inference.Peer().Do(req)
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				writeJSON(w, http.StatusOK, map[string]any{"id": id, "cancelled": true, "node": n})
				return
			}
		}
	}
	openAIError(w, http.StatusNotFound, "invalid_request_error", "not_found", fmt.Sprintf("no completion %s is running", id))
}
