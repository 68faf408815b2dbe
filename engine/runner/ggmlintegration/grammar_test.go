package ggmlintegration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// weatherSchema bounds every value, so that even random weights end the
// JSON well inside max_tokens.
const weatherSchema = `{"type":"object","properties":{
	"city":{"type":"string","maxLength":12},
	"unit":{"enum":["celsius","fahrenheit"]},
	"days":{"type":"integer"},
	"ok":{"type":"boolean"}},"required":["city","unit","days"],"additionalProperties":false}`

type weather struct {
	City *string
	Unit *string
	Days *int64
	OK   *bool
}

// checkWeather parses text strictly and checks the schema's shape.
func checkWeather(t *testing.T, what, text string, done *runnerapi.Done) {
	t.Helper()
	var w weather
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil || dec.More() {
		t.Fatalf("%s: %q is not the schema's JSON: %v", what, text, err)
	}
	if w.City == nil || len([]rune(*w.City)) > 12 || w.Unit == nil || (*w.Unit != "celsius" && *w.Unit != "fahrenheit") || w.Days == nil {
		t.Fatalf("%s: %q breaks the schema", what, text)
	}
	if done.FinishReason != "stop" {
		t.Errorf("%s: finish reason %q, want stop (the grammar ends the output)", what, done.FinishReason)
	}
}

// A random-weight model, sampled at temperature 1 under a JSON Schema
// grammar, writes JSON that validates, on one rank and on the last of
// three (where sampling happens in a pipeline).
func TestGrammarConstrainsRandomModel(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (sampling under a grammar on 1 and 3 ranks, on real ggml): runs in make test")
	}
	path := genModel(t, "Q8_0")
	spec := &grammar.Spec{Alts: []grammar.Alt{{Schema: json.RawMessage(weatherSchema)}}}
	req := func(seed uint64) runnerapi.CompletionRequest {
		r := runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: "the weather, as JSON:", MaxTokens: 200, Grammar: spec}}
		r.Sample.Temperature, r.Sample.Seed = 1, seed
		return r
	}
	_, c := newServer(t, path)
	for seed := range uint64(4) {
		_, text, done := complete(t, c, req(seed))
		checkWeather(t, "1 rank", text, done)
		t.Logf("1 rank, seed %d: %s (%d tokens)", seed, text, done.CompletionTokens)
	}
	p := startPipeline(t, path, splits[2])
	var text strings.Builder
	done, err := p.client.Complete(t.Context(), req(7), func(pc runnerapi.Piece) error {
		text.WriteString(pc.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkWeather(t, "3 ranks", text.String(), done)
	t.Logf("3 ranks: %s", text.String())

	// Without the grammar the same model writes no JSON.
	free := req(0)
	free.Grammar = nil
	if _, text, _ := complete(t, c, free); json.Valid([]byte(text)) {
		t.Errorf("unconstrained random output %q is valid JSON: the test proves nothing", text)
	}
	// A schema the grammar cannot enforce is a bad request.
	bad := req(0)
	bad.Grammar = &grammar.Spec{Alts: []grammar.Alt{{Schema: json.RawMessage(`{"type":"string","pattern":"x"}`)}}}
	if _, err := c.Complete(t.Context(), bad, func(runnerapi.Piece) error { return nil }); err == nil || !strings.Contains(err.Error(), "/pattern") {
		t.Errorf("pattern schema: %v, want an error naming /pattern", err)
	}
}

// Speculation under a grammar: prompt lookup drafts what the grammar may
// not allow; the sampler rejects those and verifies the rest under the
// grammar. Greedy, the output is the one without speculation, on one rank
// and through 3 ranks; sampled, it is JSON of the schema.
func TestSpeculationUnderGrammar(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (1 and 3 ranks, greedy and sampled, on real ggml): runs in make test")
	}
	path := genModel(t, "F32")
	spec := &grammar.Spec{Alts: []grammar.Alt{{Schema: json.RawMessage(weatherSchema)}}}
	req := runnerapi.Request{Prompt: `{"city": "Paris", "unit": "celsius", "days": 3} {"city": "Paris", "unit": "celsius", "days": 3} as JSON:`,
		MaxTokens: 200, Grammar: spec}
	_, c := newServer(t, path)
	want, text, done := complete(t, c, runnerapi.CompletionRequest{Request: req})
	checkWeather(t, "plain", text, done)
	req.Speculative = &runnerapi.Speculation{Draft: "ngram", Max: 4, Min: 2} // min: drafts to verify, whatever the costs
	got, text, done := complete(t, c, runnerapi.CompletionRequest{Request: req})
	checkWeather(t, "speculating", text, done)
	t.Logf("1 rank: %s; %d drafted, %d accepted", text, done.DraftTokens, done.AcceptedDraftTokens)
	if !slices.Equal(got, want) {
		t.Errorf("speculation changed the greedy output under the grammar:\nwant %v\ngot  %v", want, got)
	}
	if done.DraftTokens == 0 {
		t.Error("nothing drafted")
	}
	p := startPipeline(t, path, [][2]int{{0, 1}, {1, 3}, {3, 4}})
	got, done, err := p.complete(t, runnerapi.CompletionRequest{Request: req})
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("3 ranks: %v, %v; want %v", err, got, want)
	}
	for seed := range uint64(3) {
		r := runnerapi.CompletionRequest{Request: req}
		r.Sample.Temperature, r.Sample.Seed = 1, seed
		_, text, done := complete(t, c, r)
		checkWeather(t, "sampled, speculating", text, done)
	}
}
