package api

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/state"
)

// fakePulls answers by the reference: "bad", "busy", "offline" fail as
// such; anything else starts.
type fakePulls struct{ canceled []string }

func (f *fakePulls) Pull(ref string) (state.Download, error) {
	switch ref {
	case "bad":
		return state.Download{}, fmt.Errorf("%w: %q", ErrPullRef, ref)
	case "busy":
		return state.Download{}, ErrPullBusy
	case "offline":
		return state.Download{}, ErrPullOffline
	}
	return state.Download{ID: "pull-1", Ref: ref, Status: state.DownloadRunning}, nil
}

func (f *fakePulls) CancelPull(id string) error {
	if id != "pull-1" {
		return fmt.Errorf("%w %q", ErrNoPull, id)
	}
	f.canceled = append(f.canceled, id)
	return nil
}

func (f *fakePulls) DeleteModel(id string) (ModelDeleted, error) {
	switch id {
	case "busy":
		return ModelDeleted{}, fmt.Errorf("%w: instance inst-1 uses it", ErrConflict)
	case "m/x:1", "m/y:latest":
		return ModelDeleted{Model: id, Node: "self", Files: []string{"/m"}, FreedBytes: 9}, nil
	}
	return ModelDeleted{}, fmt.Errorf("%w: %q", ErrModelNotFound, id)
}

func TestPullRoutes(t *testing.T) {
	st, _ := newStore(16)
	s := newAPI(st)
	fp := &fakePulls{}
	s.Pulls = fp
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL+"/models/pull", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		body string
		code int
		has  string
	}{
		{`{"model":"hf.co/org/repo"}`, http.StatusAccepted, `"id":"pull-1"`},
		{`{"model":"bad"}`, http.StatusBadRequest, "bad model reference"},
		{`{"model":"busy"}`, http.StatusTooManyRequests, "too many"},
		{`{"model":"offline"}`, http.StatusConflict, "turned off"},
		{`{}`, http.StatusBadRequest, `is required`},
		{`{"model":`, http.StatusBadRequest, "pull body"},
	} {
		if code, body := post(c.body); code != c.code || !strings.Contains(body, c.has) {
			t.Errorf("POST %s = %d %s, want %d with %q", c.body, code, body, c.code, c.has)
		}
	}
	if r := do(t, http.MethodDelete, srv.URL+"/models/pull/pull-1", nil); r.code != http.StatusOK || len(fp.canceled) != 1 {
		t.Errorf("DELETE = %d %s", r.code, r.body)
	}
	if r := do(t, http.MethodDelete, srv.URL+"/models/pull/other", nil); r.code != http.StatusNotFound {
		t.Errorf("DELETE of an unknown pull = %d %s", r.code, r.body)
	}
	if r := get(t, srv.URL+"/models/pull"); r.code != http.StatusMethodNotAllowed {
		t.Errorf("GET /models/pull = %d", r.code)
	}
	// Model deletion: by query, for this node; another node's unknown.
	for _, c := range []struct {
		q    string
		code int
		has  string
	}{
		{"model=m%2Fx%3A1", http.StatusOK, `"freedBytes":9`},
		{"model=busy", http.StatusConflict, "inst-1"},
		{"model=nope", http.StatusNotFound, "not found"},
		{"", http.StatusBadRequest, "is required"},
		{"model=m&node=../x", http.StatusBadRequest, "node"},
		{"model=m&node=" + strings.Repeat("a", 8) + "-aaaa-aaaa-aaaa-" + strings.Repeat("a", 12), http.StatusNotFound, "not a member"},
	} {
		if r := do(t, http.MethodDelete, srv.URL+"/models?"+c.q, nil); r.code != c.code || !strings.Contains(string(r.body), c.has) {
			t.Errorf("DELETE /models?%s = %d %s, want %d with %q", c.q, r.code, r.body, c.code, c.has)
		}
	}
}
