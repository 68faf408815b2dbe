package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// The official ollama npm client (0.6.4) works unchanged against an
// agent: a streamed and an unstreamed chat (greedy, the same text), a
// generate, a chat whose format is a JSON Schema (valid JSON from a
// random-weight model), a load-only generate, the lists, show, version,
// and Ollama's error shape for a missing model and a bad schema.
func TestOllamaClient(t *testing.T) {
	p, modelID, node := startSDKAgent(t, "ollama")
	out := runNode(t, node, "ollama.mjs", "http://"+p.addr, modelID)
	t.Logf("ollama client: %s", out)
	var got struct {
		Stream struct {
			Text  string `json:"text"`
			Parts int    `json:"parts"`
			Last  struct {
				Done       bool   `json:"done"`
				DoneReason string `json:"done_reason"`
				EvalCount  int    `json:"eval_count"`
			} `json:"last"`
		} `json:"stream"`
		Once struct {
			Text            string `json:"text"`
			Done            bool   `json:"done"`
			DoneReason      string `json:"doneReason"`
			EvalCount       int    `json:"evalCount"`
			PromptEvalCount int    `json:"promptEvalCount"`
		} `json:"once"`
		Generate struct {
			Text      string `json:"text"`
			Done      bool   `json:"done"`
			EvalCount int    `json:"evalCount"`
		} `json:"generate"`
		Structured string `json:"structured"`
		Load       struct {
			Done       bool   `json:"done"`
			DoneReason string `json:"doneReason"`
		} `json:"load"`
		Tags []struct {
			Name, Family, Format string
		} `json:"tags"`
		PS []struct {
			Name      string `json:"name"`
			ExpiresAt string `json:"expiresAt"`
		} `json:"ps"`
		Show struct {
			Family, Arch string
		} `json:"show"`
		Version  string `json:"version"`
		NotFound *struct {
			Status int
			Error  string
		} `json:"notFound"`
		BadFormat *struct {
			Status int
			Error  string
		} `json:"badFormat"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %s: %v", out, err)
	}
	s := got.Stream
	if s.Parts < 3 || !s.Last.Done || s.Last.DoneReason != "length" || s.Last.EvalCount != 12 {
		t.Errorf("streamed chat: %+v", s)
	}
	if o := got.Once; !o.Done || o.Text != s.Text || o.EvalCount != 12 || o.PromptEvalCount == 0 {
		t.Errorf("unstreamed chat %+v; the greedy stream said %q", o, s.Text)
	}
	if g := got.Generate; !g.Done || g.EvalCount != 8 || g.Text == "" {
		t.Errorf("generate: %+v", g)
	}
	var st struct {
		OK   *bool   `json:"ok"`
		N    *int    `json:"n"`
		Word *string `json:"word"`
	}
	dec := json.NewDecoder(strings.NewReader(got.Structured))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil || st.OK == nil || st.N == nil || *st.N < 0 || *st.N > 99 || st.Word == nil || len([]rune(*st.Word)) > 5 {
		t.Errorf("format schema: %q (%v)", got.Structured, err)
	}
	if !got.Load.Done || got.Load.DoneReason != "load" {
		t.Errorf("load-only generate: %+v", got.Load)
	}
	if len(got.Tags) != 1 || got.Tags[0].Name != modelID || got.Tags[0].Family != "llama" || got.Tags[0].Format != "gguf" {
		t.Errorf("tags: %+v", got.Tags)
	}
	if len(got.PS) != 1 || got.PS[0].Name != modelID || !strings.HasPrefix(got.PS[0].ExpiresAt, "2318-") {
		t.Errorf("ps (a pinned instance): %+v", got.PS)
	}
	if got.Show.Family != "llama" || got.Show.Arch != "llama" || got.Version == "" {
		t.Errorf("show %+v, version %q", got.Show, got.Version)
	}
	if n := got.NotFound; n == nil || n.Status != http.StatusNotFound || !strings.Contains(n.Error, "no-such-model") {
		t.Errorf("missing model: %+v", n)
	}
	if b := got.BadFormat; b == nil || b.Status != http.StatusBadRequest || !strings.Contains(b.Error, "format: json schema at /pattern") {
		t.Errorf("a schema with a pattern: %+v", b)
	}
}

// The ollama npm client manages models through Orrery's /api/pull and
// /api/delete: a streamed pull and an unstreamed one from the stand-in
// registry, the list, a delete, and the errors of what is not there.
func TestOllamaClientModels(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed for the client tests: %v", err)
	}
	bin := buildBinary(t)
	src := t.TempDir()
	genModel(t, bin, src, "tiny-F32", "--preset", "tiny", "--seed", "7")
	data, err := os.ReadFile(filepath.Join(src, "models", "tiny-F32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	hub := pulltest.NewHub(t)
	hub.AddOllama("library", "tiny", "f32", map[string][]byte{"application/vnd.ollama.image.model": data,
		"application/vnd.ollama.image.params": []byte(`{"temperature":0}`)})
	home, dir := t.TempDir(), t.TempDir()
	env := []string{"HOME=" + home, "HF_HUB_CACHE=", "HF_HOME=", "OLLAMA_MODELS="}
	p := startAgentEnv(t, bin, testutil.FreeAddr(t), dir, env, "--loopback-dir", t.TempDir(), "--registry", hub.URL())
	waitHealthy(t, p)

	out := runNode(t, node, "ollama-models.mjs", "http://"+p.addr, "tiny:f32")
	t.Logf("ollama client: %s", out)
	var got struct {
		Streamed []struct {
			Status    string `json:"status"`
			Digest    string `json:"digest"`
			Total     int64  `json:"total"`
			Completed int64  `json:"completed"`
		} `json:"streamed"`
		Once   struct{ Status string } `json:"once"`
		Listed []string                `json:"listed"`
		Pulled *string                 `json:"pulled"`
		After  []string                `json:"after"`
		Again  *struct {
			Status int    `json:"status"`
			Error  string `json:"error"`
		} `json:"again"`
		Missing *struct {
			Status int    `json:"status"`
			Error  string `json:"error"`
		} `json:"missing"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %s: %v", out, err)
	}
	n := len(got.Streamed)
	if n < 4 || got.Streamed[0].Status != "pulling manifest" || got.Streamed[n-1].Status != "success" {
		t.Fatalf("streamed pull: %+v", got.Streamed)
	}
	// The model layer's last line: its digest, all of its bytes.
	var model bool
	for _, l := range got.Streamed {
		if l.Total == int64(len(data)) && l.Completed == l.Total && strings.HasPrefix(l.Digest, "sha256:") &&
			l.Status == "pulling "+l.Digest[7:19] {
			model = true
		}
	}
	if !model {
		t.Errorf("no line says the model layer (%d bytes) is complete: %+v", len(data), got.Streamed)
	}
	if got.Once.Status != "success" {
		t.Errorf("unstreamed pull: %+v", got.Once)
	}
	if got.Pulled == nil || !slices.Contains(got.Listed, *got.Pulled) || slices.Contains(got.After, *got.Pulled) {
		t.Errorf("pulled %v; listed %v before the delete and %v after", got.Pulled, got.Listed, got.After)
	}
	if a := got.Again; a == nil || a.Status != http.StatusNotFound || !strings.Contains(a.Error, "not found") {
		t.Errorf("deleting it again: %+v, want a 404 saying not found", a)
	}
	if m := got.Missing; m == nil || m.Status < 400 || !strings.Contains(m.Error, "no/such") {
		t.Errorf("pulling a model the registry lacks: %+v, want an error naming it", m)
	}
}
