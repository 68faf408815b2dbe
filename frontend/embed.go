// Package frontend holds the web UI, built by Vite into dist/ (`make ui`)
// and embedded in the agent, which serves it under /ui/.
package frontend

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// notBuilt is served when dist/ holds no build (a checkout where `make ui`
// has not run): the API works, the UI says how to get it.
const notBuilt = `<!doctype html><meta charset="utf-8"><title>Orrery</title>
<body style="font:15px system-ui;margin:3em">
<h1>Orrery</h1><p>This agent was built without its web UI. Run <code>make ui</code> (or <code>make build</code>), then rebuild the agent.</p>
<p>The API answers as usual, e.g. <a href="/state">/state</a>.</p>`

// Handler serves the UI: files from dist/, and index.html for every path
// that is not a file (the UI routes with its URL hash, so this only
// catches mistyped paths). Hashed assets are cached for a year; the
// index is revalidated every time.
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: it exists
	}
	return handler(sub)
}

func handler(sub fs.FS) http.Handler {
	index, err := fs.ReadFile(sub, "index.html")
	built := err == nil
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !built {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(notBuilt))
			return
		}
		p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if p != "" && p != "index.html" {
			if st, err := fs.Stat(sub, p); err == nil && !st.IsDir() {
				if strings.HasPrefix(p, "assets/") {
					w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
				}
				files.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(index)
	})
}
