package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

const testToken = "tok-0123456789abcdef"

// guarded is RequireToken over a handler that answers 200 "in".
func guarded() http.Handler {
	return RequireToken(testToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in") }))
}

func serveReq(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func reqFrom(method, target, remote, host string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr, r.Host = remote, host
	return r
}

func TestRequireToken(t *testing.T) {
	h := guarded()
	const lan, here = "192.0.2.7:40000", "127.0.0.1:40000"
	for _, c := range []struct {
		name         string
		remote, host string
		header       [2]string
		cookie       string
		want         int
	}{
		{"from this machine to a loopback name", here, "127.0.0.1:52416", [2]string{}, "", 200},
		{"localhost", "[::1]:40000", "localhost:52416", [2]string{}, "", 200},
		{"from the LAN, no token", lan, "192.0.2.1:52416", [2]string{}, "", 401},
		{"from the LAN, bearer", lan, "192.0.2.1:52416", [2]string{"Authorization", "Bearer " + testToken}, "", 200},
		{"from the LAN, wrong bearer", lan, "192.0.2.1:52416", [2]string{"Authorization", "Bearer nope-nope-nope-nope"}, "", 401},
		{"from the LAN, basic auth", lan, "192.0.2.1:52416", [2]string{"Authorization", "Basic " + testToken}, "", 401},
		{"from the LAN, x-api-key (Anthropic's clients)", lan, "192.0.2.1:52416", [2]string{"x-api-key", testToken}, "", 200},
		{"from the LAN, the login cookie", lan, "192.0.2.1:52416", [2]string{}, testToken, 200},
		// A page that rebound its own name to 127.0.0.1.
		{"DNS rebinding", here, "evil.example:52416", [2]string{}, "", 401},
	} {
		r := reqFrom(http.MethodGet, "/state", c.remote, c.host, nil)
		if c.header[0] != "" {
			r.Header.Set(c.header[0], c.header[1])
		}
		if c.cookie != "" {
			r.AddCookie(&http.Cookie{Name: TokenCookie, Value: c.cookie})
		}
		w := serveReq(h, r)
		if w.Code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, w.Body, c.want)
		}
		if w.Code == 401 && (w.Header().Get("WWW-Authenticate") == "" || !strings.Contains(w.Body.String(), "token")) {
			t.Errorf("%s: 401 without WWW-Authenticate or a word on the token: %s", c.name, w.Body)
		}
	}
	// The inference routes answer in their protocol's shape; a page load
	// gets the login form.
	w := serveReq(h, reqFrom(http.MethodPost, "/v1/chat/completions", lan, "192.0.2.1", strings.NewReader("{}")))
	if w.Code != 401 || !strings.Contains(w.Body.String(), `"invalid_api_key"`) {
		t.Errorf("chat without a token: %d %s", w.Code, w.Body)
	}
	r := reqFrom(http.MethodGet, "/ui/", lan, "192.0.2.1", nil)
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	if w := serveReq(h, r); w.Code != 401 || !strings.Contains(w.Body.String(), `action="/auth/login"`) {
		t.Errorf("page load without a token: %d %s", w.Code, w.Body)
	}
}

// The login form sets an HttpOnly, SameSite=Strict cookie for the right
// token only.
func TestLogin(t *testing.T) {
	h := guarded()
	const lan = "192.0.2.7:40000"
	if w := serveReq(h, reqFrom(http.MethodGet, LoginPath, lan, "192.0.2.1", nil)); w.Code != 200 || !strings.Contains(w.Body.String(), "<form") {
		t.Fatalf("GET login: %d", w.Code)
	}
	post := func(token string) *httptest.ResponseRecorder {
		r := reqFrom(http.MethodPost, LoginPath, lan, "192.0.2.1", strings.NewReader(url.Values{"token": {token}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return serveReq(h, r)
	}
	if w := post("wrong-wrong-wrong-wrong"); w.Code != 401 || len(w.Result().Cookies()) != 0 || !strings.Contains(w.Body.String(), "not this agent") {
		t.Errorf("wrong token: %d, cookies %v", w.Code, w.Result().Cookies())
	}
	w := post(testToken)
	cs := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/" || len(cs) != 1 {
		t.Fatalf("login: %d %v %v", w.Code, w.Header(), cs)
	}
	if c := cs[0]; c.Name != TokenCookie || c.Value != testToken || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/", c)
	}
	// JSON works too; anything else is refused.
	r := reqFrom(http.MethodPost, LoginPath, lan, "192.0.2.1", strings.NewReader(`{"token":"`+testToken+`"}`))
	r.Header.Set("Content-Type", "application/json")
	if w := serveReq(h, r); w.Code != 204 || len(w.Result().Cookies()) != 1 {
		t.Errorf("JSON login: %d", w.Code)
	}
	r = reqFrom(http.MethodPost, LoginPath, lan, "192.0.2.1", strings.NewReader(testToken))
	r.Header.Set("Content-Type", "text/plain")
	if w := serveReq(h, r); w.Code != 415 {
		t.Errorf("text login: %d", w.Code)
	}
	if w := serveReq(h, reqFrom(http.MethodPut, LoginPath, lan, "192.0.2.1", nil)); w.Code != 405 {
		t.Errorf("PUT login: %d", w.Code)
	}
}

// Wrong tokens sent in parallel wait their turn: four take at least four
// delays, as they would one after another (a lower bound, which a slow
// machine only makes easier to meet).
func TestWrongTokensInParallelWaitTheirTurn(t *testing.T) {
	h := guarded()
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := reqFrom(http.MethodGet, "/state", "192.0.2.7:40000", "192.0.2.1:52416", nil)
			r.Header.Set("Authorization", "Bearer guess-"+strings.Repeat("x", i+16))
			if w := serveReq(h, r); w.Code != 401 {
				t.Errorf("guess %d: %d", i, w.Code)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d < 4*failDelay {
		t.Errorf("4 wrong tokens in parallel took %v, under 4 × %v", d, failDelay)
	}
}

// With no place free, a request with any token, even the right one, is
// answered 429 at once, in its protocol's shape: a flood of guesses learns
// nothing and holds no more requests. A loopback request still passes, and
// one host cannot take every place.
func TestWrongTokensFlood(t *testing.T) {
	fail := newFailing(3, 2)
	h := requireToken(testToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in") }), fail)
	const flooder, other = "192.0.2.7", "192.0.2.8"
	bearer := func(from, path, tok string) *http.Request {
		r := reqFrom(http.MethodPost, path, from+":40000", "192.0.2.1:52416", strings.NewReader("{}"))
		r.Header.Set("Authorization", "Bearer "+tok)
		return r
	}
	// The places of requests being checked, taken without timing.
	if !fail.enter(flooder) || !fail.enter(flooder) || fail.enter(flooder) {
		t.Fatal("a host took other than its 2 places")
	}
	if w := serveReq(h, bearer(flooder, "/state", testToken)); w.Code != http.StatusTooManyRequests {
		t.Errorf("the flooder's own right token with its places taken: %d %s, want 429", w.Code, w.Body)
	}
	if w := serveReq(h, bearer(other, "/state", testToken)); w.Code != 200 {
		t.Errorf("another host's right token beside the flood: %d %s", w.Code, w.Body)
	}
	if !fail.enter(other) {
		t.Fatal("the third place was not free")
	}
	w := serveReq(h, bearer(other, "/v1/chat/completions", testToken))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"rate_limit_exceeded"`) {
		t.Errorf("the right token with every place taken: %d %v %s, want 429 in OpenAI's shape with Retry-After", w.Code, w.Header(), w.Body)
	}
	login := reqFrom(http.MethodPost, LoginPath, other+":40000", "192.0.2.1", strings.NewReader(`{"token":"`+testToken+`"}`))
	login.Header.Set("Content-Type", "application/json")
	if w := serveReq(h, login); w.Code != http.StatusTooManyRequests || len(w.Result().Cookies()) != 0 {
		t.Errorf("login with every place taken: %d %v", w.Code, w.Result().Cookies())
	}
	if w := serveReq(h, reqFrom(http.MethodGet, "/state", "127.0.0.1:40000", "127.0.0.1:52416", nil)); w.Code != 200 {
		t.Errorf("a loopback request with every place taken: %d", w.Code)
	}
	fail.leave(flooder)
	fail.leave(flooder)
	fail.leave(other)
	if w := serveReq(h, bearer(flooder, "/state", testToken)); w.Code != 200 {
		t.Errorf("the right token once the places are free: %d %s", w.Code, w.Body)
	}
	if fail.waiting != 0 || len(fail.byHost) != 0 {
		t.Errorf("places left taken: %d, by host %v", fail.waiting, fail.byHost)
	}
}
