package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

// Ollama's model routes: POST /api/pull and DELETE /api/delete, over this
// node's puller (agent/pull), so that `ollama pull`-style clients and Open
// WebUI manage models unchanged. /api/copy is not offered: see
// docs/api.md#ollama-api.

// ollamaPollEvery is how often a pull's progress is read from the state.
const ollamaPollEvery = 200 * time.Millisecond

// ollamaModelRef is the model an Ollama request names: "model", or "name",
// the older field (which the ollama npm client still sends for pulls).
type ollamaModelRef struct {
	Model string `json:"model"`
	Name  string `json:"name"`
}

func (r ollamaModelRef) ref() string {
	if r.Model != "" {
		return r.Model
	}
	return r.Name
}

type ollamaPullRequest struct {
	ollamaModelRef
	Insecure bool  `json:"insecure"`
	Stream   *bool `json:"stream"`
}

// ollamaPull answers POST /api/pull: it starts a pull on this node and,
// streamed (the default), writes Ollama's progress lines as the download
// goes ("pulling manifest"; "pulling <digest>" with total and completed
// per file; "verifying sha256 digest", "writing manifest", "success"), or
// unstreamed, one {"status":"success"} at the end. A client that hangs up
// cancels the pull, as with Ollama.
func (s *Server) ollamaPull(w http.ResponseWriter, r *http.Request) {
	if s.Pulls == nil {
		ollamaError(w, http.StatusNotFound, "this node pulls no models")
		return
	}
	if !requireJSON(w, r, "pull") {
		return
	}
	var req ollamaPullRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		ollamaError(w, http.StatusBadRequest, "pull body: "+err.Error())
		return
	}
	ref := req.ref()
	if ref == "" {
		ollamaError(w, http.StatusBadRequest, `pull body: "model" is required, e.g. "qwen3:8b" or "hf.co/org/repo:Q4_K_M"`)
		return
	}
	d, err := s.Pulls.Pull(ref)
	if err != nil {
		status, msg := pullStatus(err)
		ollamaError(w, status, msg)
		return
	}
	stream := req.Stream == nil || *req.Stream
	out := &ollamaLines{w: w}
	if stream {
		out.send(map[string]string{"status": "pulling manifest"})
	}
	sent := map[string]int64{} // digest → completed bytes last sent
	final, err := s.followPull(r.Context(), d.ID, func(d state.Download) error {
		if !stream {
			return nil
		}
		for _, f := range d.Files {
			if f.Size <= 0 {
				continue
			}
			dg := f.Digest
			if dg == "" {
				dg = f.Name
			}
			if last, ok := sent[dg]; ok && last == f.Bytes {
				continue
			}
			sent[dg] = f.Bytes
			if err := out.send(ollamaPullLine(f, dg)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil { // the client left, or the node is shutting down
		if cerr := s.Pulls.CancelPull(d.ID); cerr != nil && !errors.Is(cerr, ErrNoPull) && s.Logger != nil {
			s.Logger.Debug("cancel an abandoned pull", "id", d.ID, "err", cerr)
		}
		return
	}
	switch final.Status {
	case state.DownloadDone:
		// The rescan that lists the model follows the download's end:
		// wait for it, so that a client may use the model at "success".
		s.waitListed(r.Context(), final.Model)
		if stream {
			out.send(map[string]string{"status": "verifying sha256 digest"})
			out.send(map[string]string{"status": "writing manifest"})
		}
		out.send(map[string]string{"status": "success"})
	default:
		msg := final.Error
		if msg == "" {
			msg = "pull " + strings.ToLower(final.Status)
		}
		if !out.started {
			ollamaError(w, http.StatusInternalServerError, msg)
			return
		}
		out.send(map[string]string{"error": msg})
	}
}

// ollamaPullLine is one file's progress line.
func ollamaPullLine(f state.DownloadFile, digest string) map[string]any {
	short := strings.TrimPrefix(digest, "sha256:")
	if len(short) > 12 && strings.HasPrefix(digest, "sha256:") {
		short = short[:12]
	}
	line := map[string]any{"status": "pulling " + short, "total": f.Size, "completed": f.Bytes}
	if strings.HasPrefix(digest, "sha256:") {
		line["digest"] = digest
	}
	return line
}

// followPull calls each with the download's state every ollamaPollEvery
// until it ends (Done, Failed or Canceled), and returns it then; an error
// when ctx ends first or each fails.
func (s *Server) followPull(ctx context.Context, id string, each func(state.Download) error) (state.Download, error) {
	var d state.Download
	err := s.watchState(ctx, ollamaPollEvery, func(st state.State) (bool, error) {
		got, ok := st.Downloads[id]
		if !ok {
			return false, nil
		}
		d = got
		if err := each(d); err != nil {
			return true, err
		}
		return d.Status != state.DownloadRunning, nil
	})
	return d, err
}

// listedWait bounds how long a finished pull waits for its model to be
// listed (the node rescans its stores at once; this is for a slow disk).
const listedWait = 10 * time.Second

// waitListed waits until this node lists model id, at most listedWait.
func (s *Server) waitListed(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, listedWait)
	defer cancel()
	s.watchState(ctx, ollamaPollEvery/4, func(st state.State) (bool, error) { return lists(st, s.NodeID, id), nil })
}

// watchState reads the replicated state every period until done says so,
// and returns done's error; ctx's when ctx ends first.
func (s *Server) watchState(ctx context.Context, period time.Duration, done func(state.State) (bool, error)) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if ok, err := done(s.Store.State()); ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// lists reports whether node lists model id in st.
func lists(st state.State, node, id string) bool {
	return slices.ContainsFunc(st.NodeModels[node].Models, func(m state.ModelInfo) bool { return m.ID == id })
}

// pullStatus maps a Pulls error to a status and message.
func pullStatus(err error) (int, string) {
	switch {
	case errors.Is(err, ErrPullRef):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, ErrPullBusy):
		return http.StatusTooManyRequests, err.Error()
	case errors.Is(err, ErrPullOffline), errors.Is(err, ErrConflict):
		return http.StatusConflict, err.Error()
	case errors.Is(err, ErrNoPull), errors.Is(err, ErrModelNotFound):
		return http.StatusNotFound, err.Error()
	}
	return http.StatusInternalServerError, err.Error()
}

// ollamaDelete answers DELETE /api/delete {"model": NAME}: the model's
// files on this node, as Ollama removes its own. A name without a tag means
// :latest, as in Ollama. 404 in Ollama's words when this node has no such
// model; 409 when an instance uses it here.
func (s *Server) ollamaDelete(w http.ResponseWriter, r *http.Request) {
	if s.Pulls == nil {
		ollamaError(w, http.StatusNotFound, "this node manages no models")
		return
	}
	var body ollamaModelRef
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		ollamaError(w, http.StatusBadRequest, "delete body: "+err.Error())
		return
	}
	name := body.ref()
	if name == "" {
		ollamaError(w, http.StatusBadRequest, `delete body: "model" is required`)
		return
	}
	id := s.ollamaModelID(name)
	if _, err := s.Pulls.DeleteModel(id); err != nil {
		status, msg := pullStatus(err)
		if status == http.StatusNotFound {
			msg = fmt.Sprintf("model '%s' not found", name)
		}
		ollamaError(w, status, msg)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// ollamaModelID is the id of the model this node has under name: name
// itself, or name:latest when name has no tag and only that exists.
func (s *Server) ollamaModelID(name string) string {
	st := s.Store.State()
	if lists(st, s.NodeID, name) {
		return name
	}
	if i := strings.LastIndex(name, "/"); !strings.Contains(name[i+1:], ":") && lists(st, s.NodeID, name+":latest") {
		return name + ":latest"
	}
	return name
}
