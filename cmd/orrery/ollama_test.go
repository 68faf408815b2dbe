package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
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
