package api

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"html/template"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Beyond loopback, the API asks for a token. A request from this machine
// to a loopback name (the CLI, the desktop window, a browser here) goes
// through as it always has; any other one needs the token, as:
//
//   - Authorization: Bearer <token>, which OpenAI's and Ollama's clients
//     send as their API key;
//   - x-api-key: <token>, which Anthropic's clients send;
//   - the orrery_token cookie, which the login page sets for the web UI
//     (HttpOnly, SameSite=Strict).
//
// A page that rebinds its own name to 127.0.0.1 reaches the agent from
// this machine, but under its own Host: it needs the token too.

// Auth paths, answered before the token is asked for.
const (
	LoginPath  = "/auth/login"
	LogoutPath = "/auth/logout"
	// TokenCookie carries the token of a browser that logged in.
	TokenCookie = "orrery_token"
)

// failDelay slows each request that presents a wrong token, so that
// guessing a weak --api-token takes long; the wrong ones wait their turn
// (failing), so guesses sent in parallel take as long as one after another.
// A request whose token is being checked holds a place: maxFailWaiting in
// all, maxFailPerHost per remote address. With none free, a request that
// presents a token is answered 429 before its token is looked at: a flood
// of guesses learns nothing and holds no more than that many requests, and
// one host alone cannot lock the others out.
const (
	failDelay      = 250 * time.Millisecond
	maxFailWaiting = 32
	maxFailPerHost = 8
)

// failing serialises the delays of wrong tokens and counts the places.
type failing struct {
	max, perHost int
	mu           sync.Mutex // held for each delay in turn
	n            sync.Mutex // guards waiting and byHost
	waiting      int
	byHost       map[string]int
}

func newFailing(max, perHost int) *failing {
	return &failing{max: max, perHost: perHost, byHost: map[string]int{}}
}

// enter takes a place for a request from host whose token is about to be
// checked (false when none is free); leave gives it back.
func (f *failing) enter(host string) bool {
	f.n.Lock()
	defer f.n.Unlock()
	if f.waiting >= f.max || f.byHost[host] >= f.perHost {
		return false
	}
	f.waiting++
	f.byHost[host]++
	return true
}

func (f *failing) leave(host string) {
	f.n.Lock()
	defer f.n.Unlock()
	f.waiting--
	if f.byHost[host]--; f.byHost[host] <= 0 {
		delete(f.byHost, host)
	}
}

// wait is a wrong token's delay, in turn; the caller holds a place.
func (f *failing) wait() {
	f.mu.Lock()
	defer f.mu.Unlock()
	time.Sleep(failDelay)
}

// check reports whether r's token got is token, after failDelay in turn
// if it is not; false, false when no place is free (the caller answers
// 429).
func (f *failing) check(r *http.Request, got, token string) (ok, checked bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if !f.enter(host) {
		return false, false
	}
	defer f.leave(host)
	if validToken(got, token) {
		return true, true
	}
	f.wait()
	return false, true
}

// tooManyWrong answers a request that found no place free.
func tooManyWrong(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "10")
	refuse(w, r, http.StatusTooManyRequests, "Too many wrong tokens were sent: try again in a moment.",
		"rate_limit_error", "rate_limit_exceeded", "too many wrong API tokens are being checked: try again in a moment")
}

// refuse answers a request the token check turned away with status: the
// login form (saying page) to a browser's page load, the protocol's own
// error shape (typ, code) on the inference routes, JSON elsewhere.
func refuse(w http.ResponseWriter, r *http.Request, status int, page, typ, code, msg string) {
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		loginPage(w, status, page)
		return
	}
	if p := inferenceProtocol(r.URL.Path); p != nil {
		p(w, status, typ, code, msg)
		return
	}
	writeError(w, status, msg)
}

// RequireToken guards h: requests from beyond loopback need token (see
// above). LoginPath serves the login form and sets the cookie.
func RequireToken(token string, h http.Handler) http.Handler {
	return requireToken(token, h, newFailing(maxFailWaiting, maxFailPerHost))
}

func requireToken(token string, h http.Handler, fail *failing) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local(r) {
			h.ServeHTTP(w, r)
			return
		}
		switch r.URL.Path {
		case LoginPath:
			login(w, r, token, fail)
			return
		case LogoutPath:
			http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, LoginPath, http.StatusSeeOther)
			return
		}
		got, how := presented(r)
		if got != "" {
			ok, checked := fail.check(r, got, token)
			switch {
			case !checked:
				tooManyWrong(w, r)
				return
			case ok:
				h.ServeHTTP(w, r)
				return
			}
		}
		unauthorized(w, r, how)
	})
}

// local reports whether r came from this machine to a loopback name.
func local(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback() && loopbackName(r.Host)
}

// loopbackName reports whether a Host header names this machine's
// loopback (localhost, 127.0.0.0/8, ::1), with or without a port.
func loopbackName(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	ip := net.ParseIP(host)
	return strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
}

// presented is the token r carries, and how it came ("" if none).
func presented(r *http.Request) (token, how string) {
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, t, _ := strings.Cut(a, " ")
		if strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(t), "the Authorization header"
		}
		return "", "an Authorization header that is not Bearer"
	}
	if t := r.Header.Get("x-api-key"); t != "" {
		return t, "the x-api-key header"
	}
	if c, err := r.Cookie(TokenCookie); err == nil && c.Value != "" {
		return c.Value, "the login cookie"
	}
	return "", ""
}

func validToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// unauthorized answers 401: the login page to a browser's page load, JSON
// (in the protocol's own error shape for the inference routes) to the rest.
func unauthorized(w http.ResponseWriter, r *http.Request, how string) {
	msg := "this agent's API needs its token from beyond this machine: send Authorization: Bearer <token> (the agent's --api-token, or <data-dir>/api-token)"
	if how != "" {
		msg = "the token in " + how + " is not this agent's; " + msg
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="orrery"`)
	refuse(w, r, http.StatusUnauthorized, "", "authentication_error", "invalid_api_key", msg)
}

// login serves the login form (GET) and checks it (POST: a form field or
// JSON "token"); a right token sets the cookie and goes to the UI.
func login(w http.ResponseWriter, r *http.Request, token string, fail *failing) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		loginPage(w, http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, LoginPath))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	var got string
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	isJSON := mt == "application/json"
	switch {
	case isJSON:
		var body struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, "login body: "+err.Error())
			return
		}
		got = body.Token
	case mt == "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			writeError(w, http.StatusBadRequest, "login form: "+err.Error())
			return
		}
		got = r.PostForm.Get("token")
	default:
		writeError(w, http.StatusUnsupportedMediaType, "login: want a form or application/json")
		return
	}
	got = strings.TrimSpace(got)
	ok, checked := fail.check(r, got, token)
	if !checked {
		w.Header().Set("Retry-After", "10")
		if isJSON {
			writeError(w, http.StatusTooManyRequests, "login: too many wrong API tokens are being checked: try again in a moment")
			return
		}
		loginPage(w, http.StatusTooManyRequests, "Too many wrong tokens were sent: try again in a moment.")
		return
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="orrery"`)
		if isJSON {
			writeError(w, http.StatusUnauthorized, "login: not this agent's token")
			return
		}
		loginPage(w, http.StatusUnauthorized, "That is not this agent's token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: token, Path: "/", MaxAge: 365 * 24 * 3600,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	if isJSON {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

var loginTmpl = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Orrery: token</title>
<style>body{font:15px system-ui,sans-serif;max-width:30em;margin:4em auto;padding:0 1em;color:#222}
input{font:inherit;width:100%;box-sizing:border-box;padding:.4em;margin:.5em 0}button{font:inherit;padding:.4em 1em}
.err{color:#b00}code{background:#eee;padding:0 .2em}</style></head>
<body><h1>Orrery</h1>
<p>This agent answers other machines only with its token. It is in <code>&lt;data-dir&gt;/api-token</code> on the
agent's machine (or what its <code>--api-token</code> says); <code>orrery agent</code> printed it when it made it.</p>
{{if .}}<p class="err">{{.}}</p>{{end}}
<form method="post" action="/auth/login"><label>Token <input name="token" type="password" autocomplete="current-password" autofocus required></label>
<button type="submit">Open the UI</button></form>
<p>This browser then keeps it in a cookie (HttpOnly, SameSite=Strict).</p></body></html>
`))

func loginPage(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	loginTmpl.Execute(w, msg)
}
