package api

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/orrery-cluster/orrery/agent/tracestore"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/ident"
)

// TraceStore is what the trace routes need from a trace store;
// *tracestore.Store implements it.
type TraceStore interface {
	// List returns every trace's metadata, newest first.
	List() []tracestore.Meta
	Get(id string) (tracestore.Meta, error)
	OpenTrace(id string) (*os.File, tracestore.Meta, error)
	// Load returns the trace, View its index for drawing windows of it;
	// both keep the traces last read in memory.
	Load(id string) (*trace.Trace, error)
	View(id string) (*trace.Index, error)
	Delete(id string) error
}

// PerfettoOrigin is where the /perfetto/{id} page sends a trace.
const PerfettoOrigin = "https://ui.perfetto.dev"

// traceError maps a trace store error to a status.
func traceError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, tracestore.ErrBadID):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, tracestore.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// traceID returns the request's {id} once it is a valid trace id and the
// node serves traces; otherwise it answers and returns false.
func (s *Server) traceID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := ident.ValidTraceID(id); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	if s.Traces == nil {
		writeError(w, http.StatusNotFound, "this node serves no traces")
		return "", false
	}
	return id, true
}

func (s *Server) traceList(w http.ResponseWriter, r *http.Request) {
	metas := []tracestore.Meta{}
	if s.Traces != nil {
		metas = append(metas, s.Traces.List()...)
	}
	writeJSON(w, http.StatusOK, TraceList{Traces: metas})
}

func (s *Server) traceItem(w http.ResponseWriter, r *http.Request) {
	id, ok := s.traceID(w, r)
	if !ok {
		return
	}
	if r.Method == http.MethodDelete {
		if err := s.Traces.Delete(id); err != nil {
			traceError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, TraceDeleted{TaskID: id, Deleted: true})
		return
	}
	m, err := s.Traces.Get(id)
	if err != nil {
		traceError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// openTrace validates the request's id and opens its file; on failure it
// has answered the request.
func (s *Server) openTrace(w http.ResponseWriter, r *http.Request) (*os.File, string, bool) {
	id, ok := s.traceID(w, r)
	if !ok {
		return nil, "", false
	}
	f, _, err := s.Traces.OpenTrace(id)
	if err != nil {
		traceError(w, err)
		return nil, "", false
	}
	return f, id, true
}

// traceStats answers from the trace as the store keeps it loaded (Load),
// which the Trace page's timeline then draws (View): the file is read once.
func (s *Server) traceStats(w http.ResponseWriter, r *http.Request) {
	id, ok := s.traceID(w, r)
	if !ok {
		return
	}
	t, err := s.Traces.Load(id)
	if err != nil {
		viewError(w, err)
		return
	}
	st := trace.ComputeStats(t.Spans)
	st.TaskID = id
	writeJSON(w, http.StatusOK, st)
}

// traceSpans answers GET /v1/traces/{id}/spans?from=&to=&px=: what a
// timeline draws of [from, to] (µs since the trace's start; both absent:
// the whole trace) px pixels wide (default 1000), its size bounded by px
// rather than by the trace (trace.Window).
func (s *Server) traceSpans(w http.ResponseWriter, r *http.Request) {
	id, ok := s.traceID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	num := func(name string, def float64) (float64, bool) {
		v := q.Get(name)
		if v == "" {
			return def, true
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s=%q: want a finite number", name, v))
			return 0, false
		}
		return f, true
	}
	from, ok1 := num("from", 0)
	to, ok2 := num("to", 0)
	px, ok3 := num("px", 1000)
	if !ok1 || !ok2 || !ok3 {
		return
	}
	if px < 1 || px > trace.MaxWindowPx || px != math.Trunc(px) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("px=%v: want a whole number from 1 to %d", px, trace.MaxWindowPx))
		return
	}
	if (q.Has("from") || q.Has("to")) && !(from < to) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("from=%v to=%v: want from < to", from, to))
		return
	}
	x, err := s.Traces.View(id)
	if err != nil {
		viewError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, x.Window(from, to, int(px)))
}

// viewError answers a failed View: 400 or 404 for the id, else 500 (a file
// that does not load).
func viewError(w http.ResponseWriter, err error) {
	if errors.Is(err, tracestore.ErrNotFound) || errors.Is(err, tracestore.ErrBadID) {
		traceError(w, err)
		return
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}

func (s *Server) traceRaw(w http.ResponseWriter, r *http.Request) {
	f, id, ok := s.openTrace(w, r)
	if !ok {
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("stat trace %s: %v", id, err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// id is [A-Za-z0-9_-]: nothing in it needs quoting.
	h.Set("Content-Disposition", `attachment; filename="`+id+`.json"`)
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// perfettoTmpl is the hand-off page: it fetches the trace, opens the
// Perfetto UI and sends it the trace by postMessage (PING until PONG, then
// {perfetto:{buffer, title}}). html/template escapes ID for each context.
var perfettoTmpl = template.Must(template.New("perfetto").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Orrery trace {{.ID}} → Perfetto</title>
<style>
body { font: 15px/1.5 system-ui, sans-serif; margin: 3em auto; max-width: 40em; padding: 0 1em; color: #222; }
#status.error { color: #b00020; font-weight: 600; }
button { font: inherit; padding: .4em 1em; }
.hidden { display: none; }
</style>
</head>
<body>
<h1>Trace {{.ID}}</h1>
<p id="status">Loading the trace…</p>
<p><button id="open" class="hidden" type="button">Open in Perfetto</button></p>
<p id="fallback" class="hidden">Perfetto did not take the trace. Download it and open it at
<a href="{{.Origin}}" rel="noopener">{{.Origin}}</a> with “Open trace file”:
<a id="download" href="{{.RawURL}}" download="{{.ID}}.json">download {{.ID}}.json</a></p>
<script>
(function () {
  "use strict";
  var ORIGIN = {{.Origin}};
  var id = {{.ID}};
  var rawURL = {{.RawURL}};
  var statusEl = document.getElementById("status");
  var openBtn = document.getElementById("open");
  var fallback = document.getElementById("fallback");
  var buffer = null;

  function status(text, isError) {
    statusEl.textContent = text;
    statusEl.className = isError ? "error" : "";
  }
  function fail(text) {
    status(text, true);
    fallback.className = "";
  }

  function handOff() {
    var win = window.open(ORIGIN);
    if (!win) {
      status("The browser blocked the Perfetto window: click the button to open it.");
      openBtn.className = "";
      return;
    }
    openBtn.className = "hidden";
    status("Waiting for Perfetto to answer…");
    var done = false;
    var ping = setInterval(function () {
      try { win.postMessage("PING", ORIGIN); } catch (e) {}
    }, 50);
    var timeout = setTimeout(function () {
      if (done) return;
      done = true;
      clearInterval(ping);
      window.removeEventListener("message", onMessage);
      fail("Perfetto did not answer within 30 s.");
    }, 30000);
    function onMessage(ev) {
      if (done || ev.origin !== ORIGIN || ev.source !== win || ev.data !== "PONG") return;
      done = true;
      clearInterval(ping);
      clearTimeout(timeout);
      window.removeEventListener("message", onMessage);
      win.postMessage({perfetto: {buffer: buffer, title: "Orrery " + id}}, ORIGIN);
      status("Trace sent to Perfetto (" + buffer.byteLength + " bytes). You can close this tab.");
    }
    window.addEventListener("message", onMessage);
  }

  openBtn.addEventListener("click", handOff);
  fetch(rawURL).then(function (resp) {
    if (!resp.ok) {
      return resp.text().then(function (body) {
        var msg = body;
        try { msg = JSON.parse(body).error || body; } catch (e) {}
        throw new Error(resp.status + " " + resp.statusText + ": " + msg);
      });
    }
    return resp.arrayBuffer();
  }).then(function (buf) {
    buffer = buf;
    status("Loaded " + buf.byteLength + " bytes; opening Perfetto…");
    handOff();
  }).catch(function (err) {
    fail("Could not load the trace: " + err.message);
  });
})();
</script>
</body>
</html>
`))

func (s *Server) perfettoPage(w http.ResponseWriter, r *http.Request) {
	id, ok := s.traceID(w, r)
	if !ok {
		return
	}
	// Where the master keeps the traces, the page's fetch of /raw says
	// whether the trace exists.
	if _, err := s.Traces.Get(id); err != nil && s.traceHome() == "" {
		traceError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("Cache-Control", "no-store")
	data := struct{ ID, Origin, RawURL string }{id, PerfettoOrigin, "/v1/traces/" + id + "/raw"}
	var buf bytes.Buffer
	if err := perfettoTmpl.Execute(&buf, data); err != nil {
		writeError(w, http.StatusInternalServerError, "render page: "+err.Error())
		return
	}
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// traceOpen opens the trace's Perfetto hand-off page in the system browser
// of the machine the agent runs on (the menu-bar app's case).
func (s *Server) traceOpen(w http.ResponseWriter, r *http.Request) {
	id, ok := s.traceID(w, r)
	if !ok || !requireJSON(w, r, "open") {
		return
	}
	if _, err := s.Traces.Get(id); err != nil && s.traceHome() == "" {
		traceError(w, err)
		return
	}
	// The page is on the address the request came to, never on its Host:
	// with a token the API takes any Host, and a caller could otherwise
	// have this machine's browser open a page of its choosing.
	self, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		writeError(w, http.StatusInternalServerError, "open: the request's local address is unknown")
		return
	}
	page := (&url.URL{Scheme: "http", Host: self.String(), Path: "/perfetto/" + id}).String()
	if s.OpenURL == nil {
		writeJSON(w, http.StatusNotImplemented, TraceOpened{Error: "this agent cannot open a browser; open the url yourself", URL: page})
		return
	}
	if err := s.OpenURL(r.Context(), page); err != nil {
		writeJSON(w, http.StatusBadGateway, TraceOpened{Error: "open a browser: " + err.Error() + "; open the url yourself", URL: page})
		return
	}
	writeJSON(w, http.StatusOK, TraceOpened{TaskID: id, URL: page, Opened: true})
}
