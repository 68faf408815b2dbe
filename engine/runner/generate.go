package runner

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/orrery-cluster/orrery/engine/chatfmt"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

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

// lastRuneStart is the index where the last (possibly partial) rune of s
// begins: at most 3 continuation bytes back.
func lastRuneStart(s string) int {
	i := len(s) - 1
	for k := 0; i > 0 && k < 3 && !utf8.RuneStart(s[i]); k++ {
		i--
	}
	return max(i, 0)
}

// chat renders a chat request's prompt with its tools, and decides how its
// output is parsed and whether a tool call is forced (req.Grammar).
func (g *Generator) chat(req *runnerapi.Request) (string, chatfmt.Options, error) {
	var parse chatfmt.Options
	o := tokenizer.ChatOptions{Kwargs: req.ChatKwargs}
	tools, err := toolsOf(req.Tools)
	if err != nil {
		return "", parse, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
	}
	if req.ToolChoice != "none" {
		o.Tools = req.Tools
	} else {
		tools = nil
	}
	text, err := g.Tok.Chat(req.Messages, o)
	if err != nil {
		return "", parse, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
	}
	f, thinks := g.Tok.ChatFormat()
	parse = chatfmt.OptionsFor(f, thinks, len(tools) > 0, text)
	switch req.ToolChoice {
	case "", "auto", "none":
		return text, parse, nil
	case "required":
	default:
		var named []chatfmt.Tool
		for _, t := range tools {
			if t.Name == req.ToolChoice {
				named = append(named, t)
			}
		}
		if len(named) == 0 {
			return "", parse, fmt.Errorf("%w: tool_choice names %q, which is not among the tools", runnerapi.ErrBadRequest, req.ToolChoice)
		}
		tools = named
	}
	if req.Grammar != nil {
		return "", parse, fmt.Errorf("%w: a forced tool call and response_format cannot be combined", runnerapi.ErrBadRequest)
	}
	if len(tools) == 0 {
		return "", parse, fmt.Errorf("%w: tool_choice %q without tools", runnerapi.ErrBadRequest, req.ToolChoice)
	}
	if req.Grammar, err = f.CallGrammar(tools, req.ParallelToolCalls); err != nil {
		return "", parse, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
	}
	return text, parse, nil
}
