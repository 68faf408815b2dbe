//go:build netns

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent"
	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/netnstest"
)

// TestNetNSAPIToken runs an agent whose API listens on every address, in
// a network namespace, and asks it from another namespace over a veth
// (a non-loopback address), as a machine on the LAN would. Every route of
// the API listener, enumerated from the agent's own router, answers 401
// without the token and is let through with it (the runners' /internal/
// routes take each runner's own token instead: 401 with the API token
// too). The token was made at first start, printed once, and kept 0600;
// loopback stays open; the login form sets an HttpOnly, SameSite=Strict
// cookie that then opens the API to the browser; a request from this
// machine under a name that is not loopback (DNS rebinding) needs it too.
func TestNetNSAPIToken(t *testing.T) {
	netnstest.Require(t, "ip")
	bin := buildBinary(t)
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("ort-%d-a", pid), fmt.Sprintf("ort-%d-b", pid)
	netnstest.Add(t, nsA)
	netnstest.Add(t, nsB)
	const ipA = "10.232.0.1"
	netnstest.Veth(t, nsA, fmt.Sprintf("ot%da", pid), ipA+"/24", nsB, fmt.Sprintf("ot%db", pid), "10.232.0.2/24")
	dir := filepath.Join(t.TempDir(), "a")
	a := startNetnsAgent(t, bin, "a", nsA, dir, []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String(), "ORRERY_API_TOKEN="},
		"--api-addr", "0.0.0.0:52416", "--peer-addr", ipA+":52417")
	netnsPoll(t, []*netnsAgent{a}, 15*time.Second, "the agent on loopback, without a token", func() (bool, string) {
		err := a.getJSON("/node_id", &a.id)
		return err == nil && a.id != "", fmt.Sprint(err)
	})
	// The token: printed once, kept in the data dir, mode 0600.
	m := regexp.MustCompile(`answers other machines only with this token \(kept in (\S+)\): (\S+)`).FindStringSubmatch(a.stderr.String())
	if m == nil {
		t.Fatalf("the agent did not print its new token:\n%s", a.stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, agent.APITokenFile))
	st, serr := os.Stat(filepath.Join(dir, agent.APITokenFile))
	token := strings.TrimSpace(string(b))
	if err != nil || serr != nil || token != m[2] || m[1] != filepath.Join(dir, agent.APITokenFile) || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %q (mode %v), printed %q in %s: %v %v", token, st.Mode().Perm(), m[2], m[1], err, serr)
	}

	lan := netnstest.HTTPClient(nsB, 10*time.Second)
	base := "http://" + ipA + ":52416"
	do := func(method, path string, header map[string]string) (int, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("{}")
		}
		req, _ := http.NewRequestWithContext(context.Background(), method, base+path, body)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := lan.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		limit := int64(300) // streams: a little is enough
		if !strings.Contains(path, "stream") {
			limit = 64 << 10
		}
		bb, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
		return resp.StatusCode, string(bb)
	}
	apiRoutes, runnerRoutes := agent.APIRoutes()
	checked := 0
	for _, rt := range apiRoutes {
		path := concrete(rt.Pattern)
		for _, method := range rt.Methods {
			if code, body := do(method, path, nil); code != http.StatusUnauthorized {
				t.Errorf("%s %s without the token: %d %.100s, want 401", method, path, code, body)
			}
			if code, body := do(method, path, map[string]string{"Authorization": "Bearer " + token}); code == http.StatusUnauthorized || code == http.StatusForbidden {
				t.Errorf("%s %s with the token: %d %.100s", method, path, code, body)
			}
			checked++
		}
	}
	for _, rt := range runnerRoutes {
		for _, method := range rt.Methods {
			for _, h := range []map[string]string{nil, {"Authorization": "Bearer " + token}} {
				if code, body := do(method, rt.Pattern, h); code != http.StatusUnauthorized {
					t.Errorf("runner route %s %s with %v: %d %.100s, want 401 (a runner's own token only)", method, rt.Pattern, h, code, body)
				}
			}
			checked++
		}
	}
	if checked < 40 {
		t.Fatalf("only %d route/method pairs: the enumeration is broken", checked)
	}
	// Anthropic's clients send their key as x-api-key.
	if code, _ := do(http.MethodGet, "/v1/models", map[string]string{"x-api-key": token}); code != 200 {
		t.Errorf("x-api-key: %d", code)
	}

	// The browser: a page load gets the login form; the form sets the
	// cookie, which then opens the API.
	if code, body := do(http.MethodGet, "/ui/", map[string]string{"Accept": "text/html"}); code != 401 || !strings.Contains(body, "<form") {
		t.Errorf("page load without the token: %d %.200s", code, body)
	}
	noRedirect := *lan
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirect.PostForm(base+api.LoginPath, url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == api.TokenCookie {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d, cookie %+v", resp.StatusCode, cookie)
	}
	if code, _ := do(http.MethodGet, "/state/nodeIdentities", map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}); code != 200 {
		t.Errorf("with the login cookie: %d", code)
	}

	// DNS rebinding: from this machine (the agent's namespace), under a
	// name that is not loopback.
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:52416/state", nil)
	req.Host = "rebind.example:52416"
	resp, err = a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a loopback request under another name: %d, want 401", resp.StatusCode)
	}
	t.Logf("%d route/method pairs: 401 from %s without the token, through with it", checked, nsB)
}

// concrete fills a route pattern's wildcards with a value each.
func concrete(pattern string) string {
	p := strings.ReplaceAll(pattern, "{$}", "")
	p = regexp.MustCompile(`\{path\.\.\.\}`).ReplaceAllString(p, "nodeIdentities")
	p = regexp.MustCompile(`\{idx\}`).ReplaceAllString(p, "0")
	return regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(p, "x1")
}
