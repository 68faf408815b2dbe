package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Speculative decoding through a real agent: a chat asking for prompt
// lookup answers the greedy text of one without, says how many tokens it
// drafted and how many were accepted, /metrics counts them, and a bad
// speculation request is a 400.
func TestSpeculativeDecoding(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	modelID := genModel(t, bin, dir, "spec", "--preset", "tiny")
	p := startAgentEnv(t, bin, freeAddr(t), dir, []string{"HOME=" + dir}, "--loopback-dir", t.TempDir())
	waitHealthy(t, p)
	poll(t, p, 20*time.Second, "the model listed", func() (bool, string) {
		_, body, _ := p.get("/v1/models")
		return strings.Contains(string(body), modelID), string(body)
	})
	prompt := strings.Repeat("red green blue yellow ", 6)
	body := func(spec string) string {
		return `{"model":"` + modelID + `","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":40,"temperature":0,"ignore_eos":true` + spec + `}`
	}
	type answer struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Orrery struct {
			DraftTokens         int `json:"draftTokens"`
			AcceptedDraftTokens int `json:"acceptedDraftTokens"`
		} `json:"orrery"`
	}
	ask := func(b string) answer {
		t.Helper()
		code, out, err := p.post("/v1/chat/completions", b)
		var a answer
		if err != nil || code != http.StatusOK || json.Unmarshal(out, &a) != nil || len(a.Choices) != 1 {
			t.Fatalf("chat %s: %d %s %v", b, code, out, err)
		}
		return a
	}
	plain := ask(body(""))
	spec := ask(body(`,"speculative":{"draft":"ngram","max":6}`))
	t.Logf("drafted %d, accepted %d", spec.Orrery.DraftTokens, spec.Orrery.AcceptedDraftTokens)
	if spec.Choices[0].Message.Content != plain.Choices[0].Message.Content {
		t.Errorf("speculation changed the greedy answer:\n%q\n%q", plain.Choices[0].Message.Content, spec.Choices[0].Message.Content)
	}
	if plain.Orrery.DraftTokens != 0 || spec.Orrery.DraftTokens == 0 || spec.Orrery.AcceptedDraftTokens > spec.Orrery.DraftTokens {
		t.Errorf("drafts: plain %+v, speculative %+v", plain.Orrery, spec.Orrery)
	}
	_, m, _ := p.get("/metrics")
	re := regexp.MustCompile(`(?m)^orrery_draft_tokens_total (\d+)`)
	if g := re.FindSubmatch(m); g == nil || string(g[1]) != strconv.Itoa(spec.Orrery.DraftTokens) {
		t.Errorf("/metrics orrery_draft_tokens_total: %q, want %d", g, spec.Orrery.DraftTokens)
	}
	for _, c := range []struct{ spec, says string }{
		{`,"speculative":{"draft":"other-model"}`, `drafts with \"ngram\" only`},
		{`,"speculative":{"draft":"ngram","max":99}`, "want 1..16"},
		{`,"speculative":{"draft":"ngram"},"logprobs":true`, "logprobs"},
	} {
		code, out, _ := p.post("/v1/chat/completions", body(c.spec))
		if code != http.StatusBadRequest || !strings.Contains(string(out), c.says) {
			t.Errorf("speculative %s: %d %s, want 400 saying %s", c.spec, code, out, c.says)
		}
	}
}
