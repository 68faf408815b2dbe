package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// legacyCompletion is POST /v1/completions' answer (and stream chunks).
type legacyCompletion struct {
	Object  string `json:"object"`
	Choices []struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []float64            `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// checkBlackBox drives the engine-comparison surfaces through real
// agents: /tokenize and /detokenize on a node without the model's file
// (forwarded to one with it) and on that one, `orrery tokenize`, and
// /v1/completions with a string and an id prompt, streamed and not, with
// logprobs. The model must be running (greedy output is compared).
func checkBlackBox(t *testing.T, bin string, withFile, without *agentProc, modelID string) {
	t.Helper()
	type tokens struct {
		Tokens []int32 `json:"tokens"`
	}
	var toks [2]tokens
	for i, p := range []*agentProc{without, withFile} {
		code, body, err := p.post("/tokenize", `{"model":"`+modelID+`","content":"hello orrery","add_special":true}`)
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &toks[i]) != nil || len(toks[i].Tokens) < 2 {
			t.Fatalf("/tokenize on %s = %d %s %v", p.addr, code, body, err)
		}
	}
	if !slices.Equal(toks[0].Tokens, toks[1].Tokens) {
		t.Fatalf("/tokenize differs between nodes: %v vs %v", toks[0].Tokens, toks[1].Tokens)
	}
	ids := toks[0].Tokens
	code, body, _ := without.post("/tokenize", `{"model":"`+modelID+`","content":"hello orrery","with_pieces":true}`)
	var pieces struct {
		Tokens []struct {
			ID    int32           `json:"id"`
			Piece json.RawMessage `json:"piece"`
		} `json:"tokens"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &pieces) != nil || len(pieces.Tokens) != len(ids)-1 || pieces.Tokens[0].ID != ids[1] {
		t.Fatalf("/tokenize with_pieces = %d %s (ids with BOS %v)", code, body, ids)
	}
	idsJSON, _ := json.Marshal(ids[1:])
	code, body, _ = without.post("/detokenize", `{"model":"`+modelID+`","tokens":`+string(idsJSON)+`}`)
	var detok struct {
		Content string `json:"content"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &detok) != nil || strings.TrimSpace(detok.Content) != "hello orrery" {
		t.Fatalf("/detokenize = %d %s", code, body)
	}
	if code, body, _ := without.post("/tokenize", `{"model":"no-such-model","content":"x"}`); code != http.StatusNotFound {
		t.Errorf("/tokenize of an unknown model: %d %s", code, body)
	}
	// The CLI prints the same ids.
	out, err := exec.Command(bin, "tokenize", "--api", "http://"+without.addr, "--model", modelID, "--ids", "hello orrery").Output()
	if want := strings.Trim(fmt.Sprint(ids), "[]"); err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("orrery tokenize --ids = %q %v, want %q", out, err, want)
	}

	// Completions: a string prompt (BOS added) and the same as ids give
	// the same greedy text, with logprobs.
	complete := func(body string) legacyCompletion { return legacyComplete(t, without, body) }
	const n = 6
	opts := fmt.Sprintf(`"max_tokens":%d,"temperature":0,"ignore_eos":true,"logprobs":3`, n)
	byText := complete(`{"model":"` + modelID + `","prompt":"hello orrery",` + opts + `}`)
	byIDs := complete(`{"model":"` + modelID + `","prompt":` + mustJSON(t, ids) + `,` + opts + `}`)
	if byText.Choices[0].Text != byIDs.Choices[0].Text || byText.Usage.PromptTokens != len(ids) || byText.Usage.CompletionTokens != n {
		t.Fatalf("string prompt %+v, id prompt %+v", byText, byIDs)
	}
	for _, c := range []legacyCompletion{byText, byIDs} {
		lp := c.Choices[0].Logprobs
		if lp == nil || len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
			t.Fatalf("logprobs %+v", lp)
		}
		for i, l := range lp.TokenLogprobs {
			best := -1e9
			for _, v := range lp.TopLogprobs[i] {
				best = max(best, v)
			}
			// Greedy: the token is the most likely, and its logprob the
			// best of the top ones.
			if l > 0 || len(lp.TopLogprobs[i]) == 0 || len(lp.TopLogprobs[i]) > 3 || best-l > 1e-4 {
				t.Fatalf("token %d: logprob %v, top %v", i, l, lp.TopLogprobs[i])
			}
		}
	}
	// Streamed: the same text and logprobs, chunk by chunk.
	resp, err := http.Post("http://"+without.addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+modelID+`","prompt":"hello orrery","stream":true,`+opts+`}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text strings.Builder
	var lps []float64
	finished := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var c legacyCompletion
		if err := json.Unmarshal([]byte(d), &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("chunk %s: %v", d, err)
		}
		text.WriteString(c.Choices[0].Text)
		if lp := c.Choices[0].Logprobs; lp != nil {
			lps = append(lps, lp.TokenLogprobs...)
		}
		finished = finished || c.Choices[0].FinishReason != nil
	}
	want := byText.Choices[0].Logprobs.TokenLogprobs
	if resp.StatusCode != http.StatusOK || text.String() != byText.Choices[0].Text || !finished || len(lps) != n {
		t.Fatalf("stream: %d %q finished %v logprobs %v; want %q", resp.StatusCode, text.String(), finished, lps, byText.Choices[0].Text)
	}
	for i := range lps {
		if d := lps[i] - want[i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("stream logprobs %v, not streamed %v", lps, want)
		}
	}
	// echo with logprobs is refused, plainly.
	if code, body, _ := without.post("/v1/completions", `{"model":"`+modelID+`","prompt":"x","echo":true,"logprobs":1}`); code != http.StatusBadRequest ||
		!strings.Contains(string(body), "echo with logprobs") {
		t.Errorf("echo+logprobs: %d %s", code, body)
	}
}

// legacyComplete POSTs a /v1/completions request that must succeed.
func legacyComplete(t *testing.T, p *agentProc, body string) legacyCompletion {
	t.Helper()
	code, b, err := p.post("/v1/completions", body)
	var c legacyCompletion
	if err != nil || code != http.StatusOK || json.Unmarshal(b, &c) != nil || c.Object != "text_completion" || len(c.Choices) != 1 {
		t.Fatalf("/v1/completions %s = %d %s %v", body, code, b, err)
	}
	return c
}

// sameLogprobs checks that two completions' tokens and logprobs agree
// (within tol: ranks split differently round differently).
func sameLogprobs(t *testing.T, what string, got, want legacyCompletion, tol float64) {
	t.Helper()
	g, w := got.Choices[0].Logprobs, want.Choices[0].Logprobs
	if g == nil || w == nil || !slices.Equal(g.Tokens, w.Tokens) || len(g.TokenLogprobs) != len(w.TokenLogprobs) {
		t.Fatalf("%s: logprobs %+v, want %+v", what, g, w)
	}
	for i := range g.TokenLogprobs {
		if d := g.TokenLogprobs[i] - w.TokenLogprobs[i]; d > tol || d < -tol || len(g.TopLogprobs[i]) != len(w.TopLogprobs[i]) {
			t.Fatalf("%s: token %d: %v %v, want %v %v", what, i, g.TokenLogprobs[i], g.TopLogprobs[i], w.TokenLogprobs[i], w.TopLogprobs[i])
		}
	}
}
