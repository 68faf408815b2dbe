package runner

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/chatfmt"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Forwarder is what generation runs on: tokens in at the first rank, the
// last position's logits out of the last. A backend.Rank holding every
// block is one; a pipeline of ranks across nodes is another.
type Forwarder interface {
	Config() model.Config
	Options() backend.Options
	Forward(ctx context.Context, b backend.Batch) (backend.Result, error)
	Remove(seq, from int) error
	Shift(seq, keep, discard int) error
}

// logprobsN is how many top logprobs the last rank computes for r (-1:
// none).
func logprobsN(r *runnerapi.Request) int {
	if !r.Logprobs {
		return -1
	}
	return r.TopLogprobs
}

// Generator prepares requests for one model, and runs one at a time
// (Generate) for benchmarks and tests; a Server's Scheduler runs many.
type Generator struct {
	M   Engine
	Tok *tokenizer.Tokenizer
	// TraceID names the ranks' traces of Generate's request.
	TraceID string
	// ContextShift accepts a max_tokens past the context (the scheduler
	// then shifts it; see Scheduler.ContextShift).
	ContextShift bool
}

// Prepare renders and tokenizes a request's prompt, and checks that it
// fits the context.
func (g *Generator) Prepare(req *runnerapi.Request) ([]int32, error) {
	ids, _, err := g.PrepareChat(req)
	return ids, err
}

// PrepareChat is Prepare, also saying how rank 0 splits the output of a
// chat request (its reasoning and tool calls: chatfmt).
func (g *Generator) PrepareChat(req *runnerapi.Request) ([]int32, chatfmt.Options, error) {
	var parse chatfmt.Options
	if err := req.Validate(); err != nil {
		return nil, parse, err
	}
	if len(req.PromptTokens) > 0 {
		if err := g.checkTokens("prompt token", req.PromptTokens); err != nil {
			return nil, parse, err
		}
		ids, err := g.fits(req, req.PromptTokens)
		return ids, parse, err
	}
	text := req.Prompt
	if len(req.Messages) > 0 {
		var err error
		if text, parse, err = g.chat(req); err != nil {
			return nil, parse, err
		}
	}
	ids, err := g.Tok.Encode(text, true)
	if err != nil {
		return nil, parse, fmt.Errorf("%w: tokenize: %v", runnerapi.ErrBadRequest, err)
	}
	if len(ids) == 0 {
		return nil, parse, fmt.Errorf("%w: the prompt has no tokens", runnerapi.ErrBadRequest)
	}
	ids, err = g.fits(req, ids)
	return ids, parse, err
}

// checkTokens refuses ids outside the vocabulary, naming the first as
// what and its index.
func (g *Generator) checkTokens(what string, ids []int32) error {
	n := g.Tok.VocabSize()
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("%w: %s %d is %d: want 0..%d", runnerapi.ErrBadRequest, what, i, id, n-1)
		}
	}
	return nil
}

// fits checks that the prompt ids and the completion req asks for fit the
// context.
func (g *Generator) fits(req *runnerapi.Request, ids []int32) ([]int32, error) {
	ctxLen := g.M.Options().ContextLen
	if len(ids) >= ctxLen {
		return nil, fmt.Errorf("%w: the prompt is %d tokens and the context holds %d (with room for at least one generated token)",
			runnerapi.ErrPromptTooLong, len(ids), ctxLen)
	}
	if len(ids)+req.MaxTokens > ctxLen && !g.ContextShift {
		return nil, fmt.Errorf("%w: max_tokens %d after a prompt of %d tokens needs %d positions and the context holds %d (start the agent with --context-shift to generate past it)",
			runnerapi.ErrPromptTooLong, req.MaxTokens, len(ids), len(ids)+req.MaxTokens, ctxLen)
	}
	return ids, nil
}

// Generate runs one request alone (prompt from Prepare), its cache
// empty, calling emit for every piece. rec (may be nil) gets a "prefill"
// span with "compute" children per batch and a "sample" child, and a
// "decode" span per later token with the same children, each carrying its
// token index. An error from emit stops generation and is returned.
func (g *Generator) Generate(ctx context.Context, req *runnerapi.Request, prompt []int32, rec *trace.Recorder, emit func(runnerapi.Piece) error) (runnerapi.Result, error) {
	s := &Scheduler{E: g.M, Tok: g.Tok, NoPrefixCache: true, ContextShift: g.ContextShift}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(rctx) }()
	res, err := s.Submit(ctx, req, prompt, g.TraceID, rec).Wait(emit)
	stop()
	<-ran
	return res, err
}

func positions(i, j int) []int32 {
	p := make([]int32, j-i)
	for k := range p {
		p[k] = int32(i + k)
	}
	return p
}

// output turns tokens into text: it holds back bytes of a character split
// across tokens, and any tail that could be the start of a stop string, so
// that a stop string never reaches the client.
type output struct {
	stop      []string
	pending   []byte // decoded, not yet released
	done      bool
	ignoreEOS bool
}

func newOutput(stop []string) *output { return &output{stop: stop} }

// add appends token id's text and returns what can be released, and
// whether generation is over (end-of-generation token or stop string).
func (o *output) add(tok *tokenizer.Tokenizer, id int32) (runnerapi.Piece, bool) {
	if o.done {
		return runnerapi.Piece{}, true
	}
	if tok.EndsGeneration(id) && !o.ignoreEOS {
		o.done = true
		return runnerapi.Piece{Text: o.flush()}, true
	}
	special := ""
	if !tok.Special(id) {
		s, err := tok.Decode([]int32{id})
		if err == nil {
			o.pending = append(o.pending, s...)
		}
	} else if s, err := tok.Decode([]int32{id}); err == nil {
		special = s // for the formats that mark calls with control tokens
	}
	text := string(o.pending)
	for _, st := range o.stop {
		if i := strings.Index(text, st); i >= 0 {
			o.done = true
			o.pending = o.pending[:0]
			return runnerapi.Piece{Text: validPrefix(text[:i])}, true
		}
	}
	// Release all but a possible stop-string start and an incomplete rune.
	keep := 0
	for _, st := range o.stop {
		for k := min(len(st)-1, len(text)); k > keep; k-- {
			if strings.HasSuffix(text, st[:k]) {
				keep = k
				break
			}
		}
	}
	cut := len(text) - keep
	for cut > 0 && !utf8.FullRuneInString(text[lastRuneStart(text[:cut]):cut]) {
		cut = lastRuneStart(text[:cut])
	}
	o.pending = append(o.pending[:0], text[cut:]...)
	return runnerapi.Piece{Text: validPrefix(text[:cut]), Special: special}, false
}

// flush releases what is held back (invalid bytes become U+FFFD).
func (o *output) flush() string {
	s := validPrefix(string(o.pending))
	o.pending = o.pending[:0]
	return s
}

func validPrefix(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// lastRuneStart is the index where the last (possibly partial) rune of s
// begins: at most 3 continuation bytes back.
func lastRuneStart(s string) int {
	i := len(s) - 1
	for k := 0; i > 0 && k < 3 && !utf8.RuneStart(s[i]); k++ {
		i--
	}
	return max(i, 0)
}
