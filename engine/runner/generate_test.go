package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// tinyTokenizer is the tokenizer of a generated tiny model.
func tinyTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	return genTokenizer(t, model.Presets["tiny"])
}

// genTokenizer is the tokenizer of a model generated with o.
func genTokenizer(tb testing.TB, o model.GenOptions) *tokenizer.Tokenizer {
	tb.Helper()
	return modeltest.Tokenizer(tb, modeltest.Generate(tb, "m.gguf", o))
}

// script is a fake Forwarder (a unit-test double for the model): after
// position p it puts the highest logit on next[p - len(prompt)] so that
// greedy decoding emits exactly that sequence, and records the batches it
// was given.
type script struct {
	vocab, ctxLen, batch int
	parallel             int
	prompt               int
	next                 []int32
	batches              [][]int32 // positions of each Forward
	seqs                 [][]int   // sequences of each Forward
	removed              [][2]int  // Remove calls: seq, from
	shifts               [][3]int  // Shift calls: seq, keep, discard
	failAt               int       // position whose forward fails (0: never)
	block                chan struct{}
	entered              atomic.Bool   // a Forward has begun (and may wait on block)
	delay                time.Duration // per Forward
}

func (s *script) Config() model.Config { return model.Config{Vocab: s.vocab} }
func (s *script) Options() backend.Options {
	return backend.Options{ContextLen: s.ctxLen, BatchSize: s.batch, Parallel: max(s.parallel, 1)}
}
func (s *script) Shift(seq, keep, discard int) error {
	s.shifts = append(s.shifts, [3]int{seq, keep, discard})
	return nil
}
func (s *script) Remove(seq, from int) error {
	s.removed = append(s.removed, [2]int{seq, from})
	return nil
}
func (s *script) Forward(ctx context.Context, b backend.Batch) (backend.Result, error) {
	s.entered.Store(true)
	if s.block != nil {
		<-s.block
	}
	time.Sleep(s.delay)
	s.batches = append(s.batches, slices.Clone(b.Positions))
	s.seqs = append(s.seqs, slices.Clone(b.Seqs))
	outs := b.Outputs
	if outs == nil {
		outs = []int32{int32(len(b.Positions) - 1)}
	}
	var logits []float32
	for _, o := range outs {
		pos := int(b.Positions[o])
		if s.failAt != 0 && pos >= s.failAt {
			return backend.Result{}, errors.New("boom")
		}
		row := make([]float32, s.vocab)
		if i := pos + 1 - s.prompt; i >= 0 && i < len(s.next) {
			row[s.next[i]] = 10
		}
		logits = append(logits, row...)
	}
	return backend.Result{Logits: logits}, nil
}

// ids encodes s without BOS.
func ids(t *testing.T, tok *tokenizer.Tokenizer, s string) []int32 {
	t.Helper()
	x, err := tok.Encode(s, false)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func run(t *testing.T, g *Generator, req runnerapi.Request, rec *trace.Recorder) (string, []runnerapi.Piece, runnerapi.Result, error) {
	t.Helper()
	prompt, err := g.Prepare(&req)
	if err != nil {
		return "", nil, runnerapi.Result{}, err
	}
	var b strings.Builder
	var pieces []runnerapi.Piece
	res, err := g.Generate(context.Background(), &req, prompt, rec, func(p runnerapi.Piece) error {
		b.WriteString(p.Text)
		pieces = append(pieces, p)
		return nil
	})
	return b.String(), pieces, res, err
}

func TestGenerateStopsAndLimits(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello world", true)
	words := ids(t, tok, "the cluster is the model")
	eos := int32(4) // <|im_end|> ends generation in generated models
	newGen := func(next []int32) (*Generator, *script) {
		s := &script{vocab: tok.VocabSize(), ctxLen: 64, batch: 4, prompt: len(prompt), next: next}
		return &Generator{M: &Local{F: s}, Tok: tok}, s
	}

	// End-of-generation token: "stop", its text not emitted.
	g, s := newGen(append(slices.Clone(words), eos))
	text, pieces, res, err := run(t, g, runnerapi.Request{Prompt: "hello world"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(text) != "the cluster is the model" || res.FinishReason != "stop" || res.CompletionTokens != len(words)+1 {
		t.Fatalf("text %q, %+v", text, res)
	}
	if len(pieces) != len(words)+1 {
		t.Errorf("%d pieces for %d tokens", len(pieces), len(words)+1)
	}
	// Prefill went in batches of 4, then one position per decode step.
	if len(s.batches[0]) != 4 || len(s.batches[len(s.batches)-1]) != 1 {
		t.Errorf("batches %v", s.batches)
	}

	// Stop string: the text before it, never the stop string itself.
	g, _ = newGen(append(slices.Clone(words), eos))
	text, _, res, err = run(t, g, runnerapi.Request{Prompt: "hello world", Stop: []string{"is the"}}, nil)
	if err != nil || strings.TrimSpace(text) != "the cluster" || res.FinishReason != "stop" {
		t.Fatalf("stop string: %q %+v %v", text, res, err)
	}
	// A stop string that never completes is released at the end.
	g, _ = newGen(append(slices.Clone(words), eos))
	text, _, _, err = run(t, g, runnerapi.Request{Prompt: "hello world", Stop: []string{"model!"}}, nil)
	if err != nil || strings.TrimSpace(text) != "the cluster is the model" {
		t.Fatalf("partial stop string: %q %v", text, err)
	}

	// Max tokens: "length".
	g, _ = newGen(append(slices.Clone(words), eos))
	_, _, res, err = run(t, g, runnerapi.Request{Prompt: "hello world", MaxTokens: 2}, nil)
	if err != nil || res.FinishReason != "length" || res.CompletionTokens != 2 {
		t.Fatalf("max tokens: %+v %v", res, err)
	}

	// The context bounds the default completion; an explicit max_tokens
	// it cannot hold is refused, naming the numbers.
	g, s = newGen(nil)
	s.ctxLen = len(prompt) + 3
	_, _, res, err = run(t, g, runnerapi.Request{Prompt: "hello world"}, nil)
	if err != nil || res.FinishReason != "length" || res.CompletionTokens != 3 {
		t.Fatalf("context bound: %+v %v", res, err)
	}
	_, _, _, err = run(t, g, runnerapi.Request{Prompt: "hello world", MaxTokens: 100}, nil)
	if want := fmt.Sprintf("max_tokens 100 after a prompt of %d tokens needs %d positions and the context holds %d", len(prompt), len(prompt)+100, len(prompt)+3); !errors.Is(err, runnerapi.ErrPromptTooLong) || !strings.Contains(err.Error(), want) {
		t.Fatalf("max_tokens past the context: %v, want %q", err, want)
	}
	if _, _, res, err = run(t, g, runnerapi.Request{Prompt: "hello world", MaxTokens: 3}, nil); err != nil || res.CompletionTokens != 3 {
		t.Fatalf("max_tokens that just fits: %+v %v", res, err)
	}

	// A prompt that does not fit: ErrPromptTooLong, naming the numbers.
	g, s = newGen(nil)
	s.ctxLen = len(prompt)
	_, _, _, err = run(t, g, runnerapi.Request{Prompt: "hello world"}, nil)
	if !errors.Is(err, runnerapi.ErrPromptTooLong) || !strings.Contains(err.Error(), "context holds") {
		t.Fatalf("long prompt: %v", err)
	}

	// Bad parameters.
	for _, req := range []runnerapi.Request{{}, {Prompt: "x", MaxTokens: -1}, {Prompt: "x", Stop: []string{""}},
		{Prompt: "x", Stop: []string{"a", "b", "c", "d", "e"}}, {Prompt: "x", Sample: sample.Options{TopP: 2}}} {
		if _, err := g.Prepare(&req); !errors.Is(err, runnerapi.ErrBadRequest) {
			t.Errorf("%+v: %v, want ErrBadRequest", req, err)
		}
	}

	// A failing forward pass is an error naming the step.
	g, s = newGen(words)
	s.failAt = len(prompt) + 2
	if _, _, _, err = run(t, g, runnerapi.Request{Prompt: "hello world"}, nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("step at positions %d…%d", len(prompt)+2, len(prompt)+2)) {
		t.Fatalf("failing forward: %v", err)
	}
}

// Tracing: prefill/compute per batch and prefill/sample, then decode,
// decode/compute and decode/sample per token, with token indices.
func TestGenerateSpans(t *testing.T) {
	tok := tinyTokenizer(t)
	prompt, _ := tok.Encode("hello world", true)
	words := ids(t, tok, "the model")
	s := &script{vocab: tok.VocabSize(), ctxLen: 64, batch: 2, prompt: len(prompt), next: append(words, 4)}
	rec := trace.NewRecorder(0, "node-a", trace.Options{})
	_, _, res, err := run(t, &Generator{M: &Local{F: s}, Tok: tok}, runnerapi.Request{Prompt: "hello world"}, rec)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	tokens := map[string][]int32{}
	for _, sp := range rec.Drain(0) {
		count[sp.Cat]++
		if sp.Args.Has&trace.ArgToken != 0 {
			tokens[sp.Cat] = append(tokens[sp.Cat], sp.Args.Token)
		}
	}
	batches := (len(prompt) + 1) / 2
	decode := res.CompletionTokens - 1
	want := map[string]int{"prefill": 1, "prefill/compute": batches, "prefill/sample": 1,
		"decode": decode, "decode/compute": decode, "decode/sample": decode}
	for cat, n := range want {
		if count[cat] != n {
			t.Errorf("%s: %d spans, want %d (all: %v)", cat, count[cat], n, count)
		}
	}
	if got := tokens["decode/compute"]; len(got) != decode || got[0] != 1 {
		t.Errorf("decode/compute token indices %v", got)
	}
}

// The output holds back a possible stop-string start and split UTF-8.
func TestOutputHoldsBack(t *testing.T) {
	tok := tinyTokenizer(t)
	o := newOutput([]string{"<end>"})
	var got strings.Builder
	for _, id := range ids(t, tok, "ok <en") {
		p, done := o.add(tok, id)
		if done {
			t.Fatal("stopped early")
		}
		got.WriteString(p.Text)
	}
	if strings.Contains(got.String(), "<") {
		t.Fatalf("released %q before the stop string could be ruled out", got.String())
	}
	// "é" is two byte-fallback tokens: nothing is released after the first.
	o = newOutput(nil)
	// Generated vocabularies have no "é" piece: it is the byte tokens
	// <0xC3> <0xA9> (after a "▁").
	e := ids(t, tok, "é")
	first, second := e[len(e)-2], e[len(e)-1]
	if first != 5+0xC3 || second != 5+0xA9 {
		t.Fatalf("é encodes as %v, want …, <0xC3>, <0xA9>", e)
	}
	for _, id := range e[:len(e)-1] {
		if p, _ := o.add(tok, id); strings.ContainsRune(p.Text, 0xFFFD) || strings.Contains(p.Text, "\xc3") {
			t.Fatalf("released %q from half a character", p.Text)
		}
	}
	if p, _ := o.add(tok, second); p.Text != "é" {
		t.Fatalf("released %q, want é", p.Text)
	}
}
