package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// progressPulls is a Pulls whose pulls advance through the store, as the
// real puller's do: ref "fail" ends Failed, anything else Done, after
// steps of progress; "stall" never ends until canceled.
type progressPulls struct {
	fakePulls
	seq  *state.LocalSequencer
	mu   sync.Mutex
	wg   sync.WaitGroup
	stop chan struct{}
}

func (p *progressPulls) Pull(ref string) (state.Download, error) {
	if d, err := p.fakePulls.Pull(ref); err != nil || ref == "hf.co/org/repo" {
		return d, err
	}
	files := []state.DownloadFile{
		{Name: "application/vnd.ollama.image.model sha256:aaaaaaaaaaaa", Size: 300, Digest: "sha256:" + strings.Repeat("a", 64)},
		{Name: "application/vnd.ollama.image.params sha256:bbbbbbbbbbbb", Size: 20, Digest: "sha256:" + strings.Repeat("b", 64)},
	}
	d := state.Download{ID: "pull-1", NodeID: "self", Ref: ref, Status: state.DownloadRunning, Files: files, Size: 320}
	p.publish(d)
	p.wg.Add(1)
	go func(d state.Download) {
		defer p.wg.Done()
		for step := int64(1); step <= 3; step++ {
			select {
			case <-p.stop:
				d.Status = state.DownloadCanceled
				p.publish(d)
				return
			case <-time.After(2 * ollamaPollEvery):
			}
			if ref == "stall" {
				step = 0
				continue
			}
			d.Files = []state.DownloadFile{files[0], files[1]}
			d.Files[0].Bytes, d.Files[1].Bytes = 100*step, min(20, 10*step)
			d.Bytes = d.Files[0].Bytes + d.Files[1].Bytes
			p.publish(d)
		}
		d.Status, d.Model = state.DownloadDone, ref
		if ref == "fail" {
			d.Status, d.Error = state.DownloadFailed, "registry: blob sha256:aaaa… does not match its digest"
		}
		p.publish(d)
		if d.Status == state.DownloadDone { // the rescan lists it a moment later
			time.Sleep(ollamaPollEvery)
			p.mu.Lock()
			p.seq.Publish(state.NodeModelsMeasured{NodeID: "self", Models: state.NodeModels{Models: []state.ModelInfo{{ID: ref}}}})
			p.mu.Unlock()
		}
	}(d)
	return d, nil
}

func (p *progressPulls) CancelPull(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.fakePulls.CancelPull(id)
	if err == nil {
		close(p.stop)
	}
	return err
}

func (p *progressPulls) publish(d state.Download) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq.Publish(state.DownloadProgress{NodeID: "self", Download: d})
}

func newPullAPI(t *testing.T) (*progressPulls, string) {
	pp, url, _ := newPullAPIStore(t)
	return pp, url
}

func newPullAPIStore(t *testing.T) (*progressPulls, string, *state.Store) {
	st, seq := newStore(256)
	s := newAPI(st)
	s.NodeID = "self"
	pp := &progressPulls{seq: seq, stop: make(chan struct{})}
	s.Pulls = pp
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); pp.wg.Wait() })
	return pp, srv.URL, st
}

func ollamaPost(t *testing.T, ctx context.Context, url, body string) (*http.Response, []map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/pull", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return resp, lines
}

func TestOllamaPullStreams(t *testing.T) {
	_, url := newPullAPI(t)
	resp, lines := ollamaPost(t, context.Background(), url, `{"model":"tiny:f32"}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if len(lines) < 6 || lines[0]["status"] != "pulling manifest" {
		t.Fatalf("lines %v", lines)
	}
	n := len(lines)
	if lines[n-3]["status"] != "verifying sha256 digest" || lines[n-2]["status"] != "writing manifest" || lines[n-1]["status"] != "success" {
		t.Errorf("the last lines %v", lines[n-3:])
	}
	// Each file's lines: Ollama's shape, its completed bytes rising to total.
	last := map[string]float64{}
	for _, l := range lines[1 : n-3] {
		dg, _ := l["digest"].(string)
		st, _ := l["status"].(string)
		if !strings.HasPrefix(dg, "sha256:") || st != "pulling "+dg[7:19] {
			t.Fatalf("progress line %v: want status \"pulling <12 hex>\" and its digest", l)
		}
		c, total := l["completed"].(float64), l["total"].(float64)
		if c < last[dg] || c > total {
			t.Errorf("%s: completed %v after %v, of %v", dg, c, last[dg], total)
		}
		last[dg] = c
	}
	if last["sha256:"+strings.Repeat("a", 64)] != 300 || last["sha256:"+strings.Repeat("b", 64)] != 20 {
		t.Errorf("files ended at %v, want 300 and 20", last)
	}
}

func TestOllamaPullOnce(t *testing.T) {
	_, url, st := newPullAPIStore(t)
	resp, lines := ollamaPost(t, context.Background(), url, `{"model":"tiny:f32","stream":false}`)
	if resp.StatusCode != http.StatusOK || len(lines) != 1 || lines[0]["status"] != "success" {
		t.Errorf("unstreamed pull: %d %v", resp.StatusCode, lines)
	}
	// "success" waited for the node to list the model.
	if ms := st.State().NodeModels["self"].Models; len(ms) != 1 || ms[0].ID != "tiny:f32" {
		t.Errorf("at success the node lists %v, want tiny:f32", ms)
	}
	// A pull that fails: a 500 with Ollama's error unstreamed, an error
	// line streamed.
	_, url = newPullAPI(t)
	resp, lines = ollamaPost(t, context.Background(), url, `{"model":"fail","stream":false}`)
	if resp.StatusCode != http.StatusInternalServerError || len(lines) != 1 || !strings.Contains(fmt.Sprint(lines[0]["error"]), "does not match") {
		t.Errorf("failed unstreamed pull: %d %v", resp.StatusCode, lines)
	}
	_, url = newPullAPI(t)
	_, lines = ollamaPost(t, context.Background(), url, `{"model":"fail"}`)
	if last := lines[len(lines)-1]; !strings.Contains(fmt.Sprint(last["error"]), "does not match") {
		t.Errorf("failed streamed pull ended with %v", last)
	}
}

func TestOllamaPullRefusals(t *testing.T) {
	_, url := newPullAPI(t)
	for _, c := range []struct {
		body string
		code int
		has  string
	}{
		{`{"model":"bad"}`, http.StatusBadRequest, "bad model reference"},
		{`{"model":"busy"}`, http.StatusTooManyRequests, "too many"},
		{`{}`, http.StatusBadRequest, `"model" is required`},
		{`{"model":`, http.StatusBadRequest, "pull body"},
	} {
		resp, lines := ollamaPost(t, context.Background(), url, c.body)
		if resp.StatusCode != c.code || len(lines) != 1 || !strings.Contains(fmt.Sprint(lines[0]["error"]), c.has) {
			t.Errorf("POST /api/pull %s = %d %v, want %d and an error with %q", c.body, resp.StatusCode, lines, c.code, c.has)
		}
	}
}

func TestOllamaPullHangUpCancels(t *testing.T) {
	pp, url := newPullAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*ollamaPollEvery)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/pull", strings.NewReader(`{"model":"stall"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body) // until the deadline cuts it
		resp.Body.Close()
	}
	testutil.WaitFor(t, "the pull canceled when its client hung up", func() bool {
		pp.mu.Lock()
		defer pp.mu.Unlock()
		return len(pp.canceled) == 1
	})
}

func TestOllamaDelete(t *testing.T) {
	st, seq := newStore(16)
	s := newAPI(st)
	s.NodeID = "self"
	s.Pulls = &fakePulls{}
	publish(t, seq, state.NodeModelsMeasured{NodeID: "self", Models: state.NodeModels{Models: []state.ModelInfo{{ID: "m/x:1"}, {ID: "m/y:latest"}, {ID: "busy"}}}})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		body string
		code int
		has  string
	}{
		{`{"model":"m/x:1"}`, http.StatusOK, ""},
		{`{"name":"m/x:1"}`, http.StatusOK, ""},
		{`{"model":"m/y"}`, http.StatusOK, ""}, // :latest, as in Ollama
		{`{"model":"busy"}`, http.StatusConflict, "instance inst-1 uses it"},
		{`{"model":"nope:7b"}`, http.StatusNotFound, "model 'nope:7b' not found"},
		{`{}`, http.StatusBadRequest, `is required`},
		{`{"model":`, http.StatusBadRequest, "delete body"},
	} {
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/api/delete", strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := struct {
			code int
			body string
		}{resp.StatusCode, string(b)}
		if r.code != c.code || (c.has == "" && r.body != "") || !strings.Contains(r.body, c.has) {
			t.Errorf("DELETE /api/delete %s = %d %q, want %d with %q", c.body, r.code, r.body, c.code, c.has)
		}
		if c.code != http.StatusOK && !strings.HasPrefix(r.body, `{"error":`) {
			t.Errorf("%s: %q is not Ollama's error shape", c.body, r.body)
		}
	}
}
