package runner

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func TestLogprobsOf(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(-1))
	logits := []float32{1, 3, nan, 2, inf, 3}
	lp := logprobsOf(logits, 3, 4)
	// log-softmax over {1, 3, 2, 3}.
	z := math.Log(math.Exp(1) + 2*math.Exp(3) + math.Exp(2))
	if math.Abs(float64(lp.Logprob)-(2-z)) > 1e-6 || lp.Token != 3 {
		t.Fatalf("logprob %+v, want %v", lp, 2-z)
	}
	var top []int32
	for _, x := range lp.Top {
		top = append(top, x.Token)
	}
	// Ties by id; NaN and -Inf last, and never before a real logit.
	if !slices.Equal(top, []int32{1, 5, 3, 0}) || math.Abs(float64(lp.Top[0].Logprob)-(3-z)) > 1e-6 {
		t.Fatalf("top %+v", lp.Top)
	}
	if lp := logprobsOf(logits, 2, 0); len(lp.Top) != 0 || !math.IsInf(float64(lp.Logprob), -1) {
		t.Fatalf("NaN token: %+v", lp)
	}
	if lp := logprobsOf(logits, 0, 100); len(lp.Top) != len(logits) {
		t.Fatalf("top of %d: %d", len(logits), len(lp.Top))
	}
}

// Token-id prompts are used as they are; echo emits the prompt's text
// first; logprobs come with every sampled token, none with the echo.
func TestGenerateTokensEchoLogprobs(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt := ids(t, tok, "hello world")
	words := ids(t, tok, "the cluster")
	s := &script{vocab: tok.VocabSize(), ctxLen: 64, batch: 4, prompt: len(prompt), next: words}
	g := &Generator{M: &Local{F: s}, Tok: tok}
	text, pieces, res, err := run(t, g, runnerapi.Request{PromptTokens: prompt, Echo: true, Logprobs: true, TopLogprobs: 2, MaxTokens: len(words)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.PromptTokens != len(prompt) || !strings.HasPrefix(text, "hello world") || strings.TrimSpace(strings.TrimPrefix(text, "hello world")) != "the cluster" {
		t.Fatalf("text %q, %+v", text, res)
	}
	if !pieces[0].Echo || pieces[0].Logprobs != nil || pieces[0].Token != -1 || pieces[0].Text != "hello world" {
		t.Fatalf("echo piece %+v", pieces[0])
	}
	for _, p := range pieces[1:] {
		if p.Token < 0 {
			continue
		}
		lp := p.Logprobs
		// The script puts logit 10 on the next token, 0 elsewhere.
		want := 10 - math.Log(math.Exp(10)+float64(tok.VocabSize()-1))
		if lp == nil || lp.Token != p.Token || math.Abs(float64(lp.Logprob)-want) > 1e-5 || len(lp.Top) != 2 ||
			lp.Top[0].Token != p.Token || lp.Top[0].Text == "" || lp.Text == "" {
			t.Fatalf("piece %+v logprobs %+v (want %v)", p, lp, want)
		}
	}
	// Ids out of the vocabulary and too many top logprobs are refused.
	if _, err := g.Prepare(&runnerapi.Request{PromptTokens: []int32{int32(tok.VocabSize())}}); err == nil {
		t.Fatal("out-of-vocabulary prompt token accepted")
	}
	if _, err := g.Prepare(&runnerapi.Request{Prompt: "x", Logprobs: true, TopLogprobs: runnerapi.MaxTopLogprobs + 1}); err == nil {
		t.Fatal("top logprobs over the limit accepted")
	}
}

func TestTokenFrameLogprobs(t *testing.T) {
	lp := &runnerapi.Logprobs{TokenLogprob: runnerapi.TokenLogprob{Token: 5, Logprob: -0.25}, Top: []runnerapi.TokenLogprob{{Token: 5, Logprob: -0.25}, {Token: 9, Logprob: -3}}}
	m := tokenMsg{Seq: 3, Samples: []Sampled{{Slot: 2, Tokens: []int32{5}, Logprobs: []*runnerapi.Logprobs{lp}}, {Slot: 0, Tokens: []int32{7}}}}
	b := m.marshal(nil)
	var got tokenMsg
	if err := got.unmarshal(b); err != nil || got.Seq != 3 || !reflect.DeepEqual(got.Samples, m.Samples) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range [][]byte{b[:len(b)-1], b[:20], append(b, 0), b[:4]} {
		if got.unmarshal(bad) == nil {
			t.Errorf("frame of %d bytes parsed", len(bad))
		}
	}
	// An embedding carries no token: its frame's token field is -1, and
	// a frame with another there is refused (it would not marshal back).
	emb := tokenMsg{Seq: 4, Samples: []Sampled{{Slot: 1, Embedding: []float32{0.5, -1}}}}
	b = emb.marshal(nil)
	if err := got.unmarshal(b); err != nil || !reflect.DeepEqual(got.Samples, emb.Samples) {
		t.Fatalf("embedding: %+v %v", got, err)
	}
	b[8] = 7 // the sample's token field, after Seq, the count and the slot
	if err := got.unmarshal(b); err == nil {
		t.Errorf("an embedding with token 7 parsed: %+v", got.Samples)
	}
}

// A verified group's tokens cross with one logprobs each, or with none.
func TestTokenFrameVerifiedLogprobs(t *testing.T) {
	lps := []*runnerapi.Logprobs{{TokenLogprob: runnerapi.TokenLogprob{Token: 4, Logprob: -0.5}, Top: []runnerapi.TokenLogprob{{Token: 4, Logprob: -0.5}}},
		{TokenLogprob: runnerapi.TokenLogprob{Token: 9, Logprob: -2}, Top: []runnerapi.TokenLogprob{{Token: 3, Logprob: -1}}}}
	m := tokenMsg{Seq: 5, Samples: []Sampled{{Slot: 1, Tokens: []int32{4, 9}, Drafted: 3, Logprobs: lps}, {Slot: 2, Tokens: []int32{6}, Drafted: 1}}}
	b := m.marshal(nil)
	var got tokenMsg
	if err := got.unmarshal(b); err != nil || !reflect.DeepEqual(got.Samples, m.Samples) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range [][]byte{b[:len(b)-1], b[:len(b)-10], append(slices.Clone(b), 0)} {
		if got.unmarshal(bad) == nil {
			t.Errorf("frame of %d bytes parsed", len(bad))
		}
	}
}

func TestActFrame(t *testing.T) {
	m := actMsg{Seq: 9, Groups: []actGroup{{Slot: 3, Decode: true, Sample: true, Token: 4, Start: 20, N: 1}, {Slot: 1, Start: 8, N: 2},
		{Slot: 5, Decode: true, Sample: true, Start: 30, N: 3, Drafts: []int32{77, 78}}},
		Hidden: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}
	b := m.marshal(nil)
	var got actMsg
	if err := got.unmarshal(b, 2); err != nil || got.Seq != 9 || !reflect.DeepEqual(got.Groups, m.Groups) || !slices.Equal(got.Hidden, m.Hidden) {
		t.Fatalf("%+v %v", got, err)
	}
	dup := actMsg{Seq: 1, Groups: []actGroup{{Slot: 1, N: 1}, {Slot: 1, N: 1}}, Hidden: []float32{1, 2}}
	empty := actMsg{Seq: 1, Groups: []actGroup{{Slot: 1, N: 0}}}
	for name, bad := range map[string][]byte{"short": b[:len(b)-1], "long": append(slices.Clone(b), 0, 0, 0, 0),
		"slot twice": dup.marshal(nil), "no rows": empty.marshal(nil), "dim": b} {
		dim := 2
		if name == "dim" {
			dim = 3
		}
		if got.unmarshal(bad, dim) == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
