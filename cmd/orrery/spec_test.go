package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// Speculative decoding through a real agent: an instance placed with a
// draft model (a copy of the model, beside rank 0); chats asking for prompt
// lookup or for the draft answer the greedy text of one without, say how
// many tokens they drafted and how many were accepted (all of the copy's),
// /metrics counts them, bad requests are 400s, and logprobs come with
// every token. "min" keeps drafts coming: a copy of the model costs what it
// saves, and adaptive K would rightly stop drafting with it.
func TestSpeculativeDecoding(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	modelID := genModel(t, bin, dir, "spec", "--preset", "tiny")
	draftID := genModel(t, bin, dir, "spec-draft", "--preset", "tiny") // the same bytes
	p := startAgentEnv(t, bin, testutil.FreeAddr(t), dir, []string{"HOME=" + dir}, "--loopback-dir", t.TempDir())
	waitHealthy(t, p)
	poll(t, p, 20*time.Second, "the models listed", func() (bool, string) {
		_, body, _ := p.get("/v1/models")
		return strings.Contains(string(body), modelID) && strings.Contains(string(body), draftID), string(body)
	})
	if code, out, _ := p.post("/instance", `{"model":"`+modelID+`","draftModel":"nowhere"}`); code != http.StatusBadRequest || !strings.Contains(string(out), `draft model \"nowhere\" is not on node`) {
		t.Errorf("a draft model the node lacks: %d %s, want 400", code, out)
	}
	in := placeJSON(t, p, `{"model":"`+modelID+`","draftModel":"`+draftID+`"}`)
	waitReadyRanks(t, p, in)
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
	spec := ask(body(`,"speculative":{"draft":"ngram","max":6,"min":2}`))
	t.Logf("prompt lookup: drafted %d, accepted %d", spec.Orrery.DraftTokens, spec.Orrery.AcceptedDraftTokens)
	if spec.Choices[0].Message.Content != plain.Choices[0].Message.Content {
		t.Errorf("speculation changed the greedy answer:\n%q\n%q", plain.Choices[0].Message.Content, spec.Choices[0].Message.Content)
	}
	byDraft := ask(body(`,"speculative":{"draft":"` + draftID + `","max":4,"min":4,"p_min":0}`))
	t.Logf("draft model: drafted %d, accepted %d", byDraft.Orrery.DraftTokens, byDraft.Orrery.AcceptedDraftTokens)
	if byDraft.Choices[0].Message.Content != plain.Choices[0].Message.Content || byDraft.Orrery.DraftTokens == 0 ||
		byDraft.Orrery.AcceptedDraftTokens < byDraft.Orrery.DraftTokens*9/10 {
		t.Errorf("the draft model's answer %q (%+v), want %q with its drafts accepted", byDraft.Choices[0].Message.Content, byDraft.Orrery, plain.Choices[0].Message.Content)
	}
	if plain.Orrery.DraftTokens != 0 || spec.Orrery.DraftTokens == 0 || spec.Orrery.AcceptedDraftTokens > spec.Orrery.DraftTokens {
		t.Errorf("drafts: plain %+v, speculative %+v", plain.Orrery, spec.Orrery)
	}
	_, m, _ := p.get("/metrics")
	re := regexp.MustCompile(`(?m)^orrery_draft_tokens_total (\d+)`)
	if g := re.FindSubmatch(m); g == nil || string(g[1]) != strconv.Itoa(spec.Orrery.DraftTokens+byDraft.Orrery.DraftTokens) {
		t.Errorf("/metrics orrery_draft_tokens_total: %q, want %d", g, spec.Orrery.DraftTokens+byDraft.Orrery.DraftTokens)
	}
	for _, c := range []struct{ spec, says string }{
		{`,"speculative":{"draft":"other-model"}`, `drafts with \"ngram\" or its draft model \"spec-draft\"`},
		{`,"speculative":{"draft":"ngram","max":99}`, "want 1..16"},
		{`,"speculative":{"draft":""}`, "draft is missing"},
		{`,"speculative":{"draft":"ngram","p_min":1.5}`, "p_min 1.5: want 0..1"},
	} {
		code, out, _ := p.post("/v1/chat/completions", body(c.spec))
		if code != http.StatusBadRequest || !strings.Contains(string(out), c.says) {
			t.Errorf("speculative %s: %d %s, want 400 saying %s", c.spec, code, out, c.says)
		}
	}
	// With logprobs: one entry per token, the greedy answer's.
	code, out, _ := p.post("/v1/chat/completions", body(`,"speculative":{"draft":"ngram","max":6},"logprobs":true,"top_logprobs":2`))
	var lp struct {
		Choices []struct {
			Message  struct{ Content string } `json:"message"`
			Logprobs struct {
				Content []struct {
					Token       string  `json:"token"`
					Logprob     float64 `json:"logprob"`
					TopLogprobs []any   `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Orrery struct {
			DraftTokens int `json:"draftTokens"`
		} `json:"orrery"`
	}
	if code != http.StatusOK || json.Unmarshal(out, &lp) != nil || len(lp.Choices) != 1 {
		t.Fatalf("speculating with logprobs: %d %s", code, out)
	}
	c := lp.Choices[0]
	if c.Message.Content != plain.Choices[0].Message.Content || len(c.Logprobs.Content) != 40 || lp.Orrery.DraftTokens == 0 {
		t.Errorf("speculating with logprobs: %q, %d logprobs, %d drafted; want %q, 40, some", c.Message.Content, len(c.Logprobs.Content), lp.Orrery.DraftTokens, plain.Choices[0].Message.Content)
	}
	for i, e := range c.Logprobs.Content {
		if e.Logprob > 0 || len(e.TopLogprobs) != 2 {
			t.Errorf("logprobs entry %d: %+v", i, e)
			break
		}
	}
	instanceDefault(t, p, in.InstanceID, modelID, draftID, plain.Choices[0].Message.Content, body, func(b string) (string, int) {
		a := ask(b)
		return a.Choices[0].Message.Content, a.Orrery.DraftTokens
	})
}

// instanceDefault: an instance placed with a default speculation drafts
// for requests that name none (the greedy answer unchanged), not for one
// that says "none"; a default the instance cannot draft with is a 400.
// It replaces instance old.
func instanceDefault(t *testing.T, p *agentProc, old, modelID, draftID, want string, body func(string) string, ask func(string) (string, int)) {
	t.Helper()
	for _, c := range []struct{ spec, says string }{
		{`{"draft":"other-model"}`, `the instance drafts with \"ngram\" or its draft model`},
		{`{"draft":"ngram","max":99}`, "want 1..16"},
		{`{"draft":"none"}`, `draft \"none\"`},
	} {
		code, out, _ := p.post("/instance", `{"model":"`+modelID+`","draftModel":"`+draftID+`","speculative":`+c.spec+`}`)
		if code != http.StatusBadRequest || !strings.Contains(string(out), c.says) {
			t.Errorf("default speculative %s: %d %s, want 400 saying %s", c.spec, code, out, c.says)
		}
	}
	deleteInstance(t, p, old)
	// "min": drafts in every answer, though a copy of the model costs
	// what it saves.
	in := placeJSON(t, p, `{"model":"`+modelID+`","draftModel":"`+draftID+`","speculative":{"draft":"`+draftID+`","max":4,"min":2}}`)
	waitReadyRanks(t, p, in)
	var st struct {
		Instances map[string]struct {
			Speculative *struct {
				Draft string
				Max   int
			}
		}
	}
	p.mustGet(t, "/state", &st)
	if sp := st.Instances[in.InstanceID].Speculative; sp == nil || sp.Draft != draftID || sp.Max != 4 {
		t.Errorf("the instance's default speculation in the state: %+v", sp)
	}
	if got, drafted := ask(body("")); got != want || drafted == 0 {
		t.Errorf("a request naming no speculation: %q with %d drafted, want %q drafted by the default", got, drafted, want)
	}
	if got, drafted := ask(body(`,"speculative":{"draft":"none"}`)); got != want || drafted != 0 {
		t.Errorf(`"draft": "none": %q with %d drafted, want %q and none`, got, drafted, want)
	}
	if got, drafted := ask(body(`,"speculative":{"draft":"ngram","max":2,"min":1}`)); got != want || drafted == 0 {
		t.Errorf("a request's own speculation: %q with %d drafted", got, drafted)
	}
}

// Speculation in a tensor-parallel group over two real agents: the
// leader verifies, its rollbacks replay on the other rank, and the greedy
// answer is the one without speculation.
func TestSpeculativeTensorGroup(t *testing.T) {
	bin := buildBinary(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	modelID := genModel(t, bin, dirs[0], "spec-tp", "--preset", "tiny")
	ps, ids := loopbackCluster(t, bin, dirs, nil)
	a := ps[0]
	in := placeJSON(t, a, `{"model":"`+modelID+`","nodes":["`+ids[0]+`","`+ids[1]+`"],"parallelism":"tensor"}`)
	waitReadyRanks(t, a, in)
	body := `{"model":"` + modelID + `","prompt":"` + strings.Repeat("one two three ", 8) + `","max_tokens":40,"temperature":0,"ignore_eos":true`
	plain := legacyComplete(t, a, body+`}`)
	code, out, err := a.post("/v1/completions", body+`,"speculative":{"draft":"ngram","max":4,"min":2}}`)
	var spec struct {
		Choices []struct{ Text string } `json:"choices"`
		Orrery  struct {
			DraftTokens         int `json:"draftTokens"`
			AcceptedDraftTokens int `json:"acceptedDraftTokens"`
		} `json:"orrery"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(out, &spec) != nil || len(spec.Choices) != 1 {
		t.Fatalf("speculative completion: %d %s %v", code, out, err)
	}
	t.Logf("tensor 2: drafted %d, accepted %d", spec.Orrery.DraftTokens, spec.Orrery.AcceptedDraftTokens)
	if spec.Choices[0].Text != plain.Choices[0].Text || spec.Orrery.DraftTokens == 0 {
		t.Errorf("tensor 2 with speculation: %q (%+v), want %q", spec.Choices[0].Text, spec.Orrery, plain.Choices[0].Text)
	}
	// The group still agrees after the rollbacks: the plain answer again.
	if again := legacyComplete(t, a, body+`}`); again.Choices[0].Text != plain.Choices[0].Text {
		t.Errorf("after speculation the group answers %q, before %q", again.Choices[0].Text, plain.Choices[0].Text)
	}
}
