package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// What the two OpenAI completion endpoints (chat and legacy) share: reading
// and routing the request, and the event stream of an answer.

// completionBody is a completion request body: OpenAI's chat or legacy,
// or Ollama's chat or generate. writeError answers in its protocol's
// error shape.
type completionBody interface {
	modelID() string
	keepAlive() *KeepAlive
	toRunner() (runnerapi.Request, error)
	writeError(w http.ResponseWriter, status int, typ, code, msg string)
}

// writeRunError answers err in body's protocol.
func writeRunError(w http.ResponseWriter, body completionBody, err error) {
	status, typ, code := inferenceStatus(err)
	body.writeError(w, status, typ, code, err.Error())
}

// completionRun is a completion request read, routed to this node and
// ready to run.
type completionRun struct {
	req        runnerapi.Request
	model      string
	instanceID string
	traceID    string // "" when the request asked for no trace
	id         string // the response's id: idPrefix and the trace's unique part
	created    int64
	start      time.Time
	// release ends the Hold on the instance: call it when the request
	// ends.
	release func()
}

// startCompletion reads a completion request into body (what
// names it in errors) and routes it: to another node, answering the
// request (ok false), or to this one, with the trace and node headers set
// and the instance held (the caller must call c.release).
func (s *Server) startCompletion(w http.ResponseWriter, r *http.Request, forwarded bool, path, what, idPrefix string,
	body completionBody) (c completionRun, ok bool) {
	if s.Inference == nil {
		body.writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", "this node serves no models")
		return c, false
	}
	if mt, _, _ := mimeType(r); mt != "application/json" {
		body.writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "invalid_content_type", "want Content-Type: application/json")
		return c, false
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		body.writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_body", "read body: "+err.Error())
		return c, false
	}
	if err := json.Unmarshal(raw, body); err != nil {
		body.writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", what+": "+err.Error())
		return c, false
	}
	req, err := body.toRunner()
	if err != nil {
		body.writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", err.Error())
		return c, false
	}
	instanceID, node, err := s.Inference.Route(r.Context(), body.modelID(), body.keepAlive())
	if err != nil {
		writeRunError(w, body, err)
		return c, false
	}
	if node != s.NodeID {
		if forwarded {
			body.writeError(w, http.StatusMisdirectedRequest, "server_error", "misrouted", fmt.Sprintf("instance %s is on %s, not here", instanceID, node))
			return c, false
		}
		s.forward(w, r, node, path, raw)
		return c, false
	}
	release, err := s.Inference.Hold(instanceID, body.keepAlive())
	if err != nil {
		writeRunError(w, body, err)
		return c, false
	}
	c = completionRun{req: s.withDefaults(body, req), model: body.modelID(), instanceID: instanceID, created: time.Now().Unix(), start: time.Now(), release: release}
	unique := newTraceID()
	if !strings.EqualFold(r.Header.Get(TraceHeader), "off") {
		c.traceID = unique
		w.Header().Set(TraceIDHeader, c.traceID)
	}
	c.id = idPrefix + strings.TrimPrefix(unique, "chat-")
	w.Header().Set(NodeHeader, s.NodeID)
	return c, true
}

// ext is the orrery object of a finished run.
func (s *Server) ext(c *completionRun, d *runnerapi.Done) orreryExt {
	return s.runExt(c.traceID, c.instanceID, c.start, d)
}

// eventStream writes an OpenAI event stream (data: JSON lines, then
// [DONE]). Its 200 waits for the first event, so that a request the runner
// refuses before any output still gets a proper status.
type eventStream struct {
	w       http.ResponseWriter
	flusher http.Flusher
	started bool
	// headers: the 200 went out (with the first event, or before it with
	// comments while the instance loads).
	headers bool
	// first, when set, is sent right after the headers (chat's role chunk).
	first func() error
}

func newEventStream(w http.ResponseWriter) *eventStream {
	f, _ := w.(http.Flusher)
	return &eventStream{w: w, flusher: f}
}

// begin sends the headers (and the first event) once.
func (e *eventStream) begin() error {
	if e.started {
		return nil
	}
	e.started = true
	e.writeHeaders()
	if e.first != nil {
		return e.first()
	}
	return nil
}

// writeHeaders sends the stream's 200 and headers once.
func (e *eventStream) writeHeaders() {
	if e.headers {
		return
	}
	e.headers = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
}

// comment writes an SSE comment line (": text"), which clients skip and
// which keeps clients and proxies from timing a quiet stream out. It sends
// the headers, not the first event.
func (e *eventStream) comment(text string) error {
	e.writeHeaders()
	if _, err := fmt.Fprintf(e.w, ": %s\n\n", text); err != nil {
		return err
	}
	e.flush()
	return nil
}

// loadTick is how often a stream waiting for its instance to load hears
// how far it got.
const loadTick = time.Second

// awaitLoad holds a request while its instance loads; a stream (st not
// nil) hears a comment every loadTick saying how far ("loading 5/16
// layers"). A rank that fails to load ends it with ErrLoadFailed.
func (s *Server) awaitLoad(ctx context.Context, st *eventStream, instanceID string) error {
	t := time.NewTicker(loadTick)
	defer t.Stop()
	for {
		p, err := s.Inference.Progress(instanceID)
		if err != nil || p.Ready {
			return err
		}
		if st != nil {
			if err := st.comment(fmt.Sprintf("loading %d/%d layers", p.Loaded, p.Total)); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// send writes one event.
func (e *eventStream) send(v any) error {
	b, _ := json.Marshal(v)
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return err
	}
	e.flush()
	return nil
}

func (e *eventStream) flush() {
	if e.flusher != nil {
		e.flusher.Flush()
	}
}

// fail reports err: as a status before the headers went out, else as an
// error event (the OpenAI SDKs raise it) with no [DONE].
func (e *eventStream) fail(err error) {
	if !e.headers {
		inferenceError(e.w, err)
		return
	}
	_, typ, code := inferenceStatus(err)
	e.send(map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "code": code}})
}

// done ends the stream.
func (e *eventStream) done() {
	fmt.Fprint(e.w, "data: [DONE]\n\n")
	e.flush()
}

// answer is a completion response object, or one event of a stream: its
// one choice and, on the last, extra fields (usage, orrery).
func (c *completionRun) answer(object string, choice map[string]any, extra map[string]any) map[string]any {
	m := map[string]any{"id": c.id, "object": object, "created": c.created, "model": c.model, "choices": []any{choice}}
	for k, v := range extra {
		m[k] = v
	}
	return m
}
