package app

import (
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// rootPage sends the window on to the UI. Wails loads its start page at
// "/" (wails://wails/ on Linux) and has no start-URL option in production;
// a page, unlike the agent's 302, needs nothing of the webview's custom
// scheme handler, and keeps the URL at /ui/ as in a browser.
const rootPage = `<!doctype html><meta charset="utf-8"><title>Orrery</title>
<meta http-equiv="refresh" content="0; url=/ui/">
<script>location.replace('/ui/' + location.hash)</script>`

// NewProxy returns the window's asset handler: a reverse proxy to the
// agent's local API at api (http://127.0.0.1:52416), so that the window
// shows the same UI, from the same API, as a browser does.
//
// The Host header is set to the agent's, whose loopback Host check would
// refuse the webview's ("wails"); the agent also builds hand-off URLs from
// it. Responses are flushed at once (FlushInterval -1) so that SSE
// (/events/stream) streams.
func NewProxy(api string, log *slog.Logger) (http.Handler, error) {
	target, err := url.Parse(api)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("proxy target %q: want http://host:port", api)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target) // also sets the outbound Host to the target's
			// The agent does not check Origin; the webview's
			// "wails://wails" would only confuse it.
			r.Out.Header.Del("Origin")
		},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("agent unreachable", "path", r.URL.Path, "err", err)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, `<!doctype html><meta charset="utf-8"><title>Orrery</title>
<body style="font:15px system-ui;margin:3em"><h1>Orrery</h1>
<p>The agent at %s does not answer: %s</p><p><a href="/ui/">Try again</a></p>`,
				html.EscapeString(api), html.EscapeString(err.Error()))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write([]byte(rootPage))
			return
		}
		rp.ServeHTTP(w, r)
	}), nil
}
