package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/chatfmt"
	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Limits of one request.
const (
	// DefaultMaxTokens is the completion budget when a request sets none.
	DefaultMaxTokens = 256
	// MaxStop and MaxStopLen bound the stop strings (OpenAI allows 4).
	MaxStop    = 4
	MaxStopLen = 256
)

// ErrPromptTooLong is wrapped by the error for a prompt that does not fit
// the context with room for one generated token.
var ErrPromptTooLong = errors.New("prompt longer than the context")

// ErrBadRequest is wrapped by errors in a request's parameters.
var ErrBadRequest = errors.New("bad request")

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

// Request is one completion: chat messages (rendered with the model's
// template), a raw prompt, or the prompt's token ids.
type Request struct {
	Messages []model.Message `json:"messages,omitempty"`
	Prompt   string          `json:"prompt,omitempty"`
	// PromptTokens is a prompt already tokenized (used as is, no BOS
	// added); it wins over Prompt.
	PromptTokens []int32 `json:"promptTokens,omitempty"`
	// Echo emits the prompt's text as a first Piece (with Echo set).
	Echo bool `json:"echo,omitempty"`
	// Logprobs attaches each sampled token's log probability to its
	// Piece, with the TopLogprobs (0..MaxTopLogprobs) most likely tokens.
	Logprobs    bool `json:"logprobs,omitempty"`
	TopLogprobs int  `json:"topLogprobs,omitempty"`
	// MaxTokens caps the completion (0: DefaultMaxTokens, cut at the
	// context's end). A MaxTokens the context cannot hold after the
	// prompt is refused (ErrPromptTooLong, both numbers).
	MaxTokens int            `json:"maxTokens,omitempty"`
	Stop      []string       `json:"stop,omitempty"`
	Sample    sample.Options `json:"sample"`
	// IgnoreEOS keeps generating past end-of-generation tokens, so that
	// a benchmark decodes exactly MaxTokens.
	IgnoreEOS bool `json:"ignoreEos,omitempty"`
	// NoPromptCache computes the whole prompt, reusing no cached prefix
	// (benchmarks of prefill).
	NoPromptCache bool `json:"noPromptCache,omitempty"`
	// Grammar constrains the output (structured output, forced tool
	// calls); the rank that samples compiles and enforces it.
	Grammar *grammar.Spec `json:"grammar,omitempty"`
	// Tools (OpenAI's tools array) go to the chat template, and the
	// output is parsed for calls in the model's format. ToolChoice is
	// "auto" (or empty), "none" (no tools shown, none parsed), "required"
	// (a call forced by grammar) or a tool's name (that tool's call
	// forced); ParallelToolCalls lets a forced answer hold several calls.
	Tools             json.RawMessage `json:"tools,omitempty"`
	ToolChoice        string          `json:"toolChoice,omitempty"`
	ParallelToolCalls bool            `json:"parallelToolCalls,omitempty"`
	// ChatKwargs are the template's keyword arguments (enable_thinking,
	// reasoning_effort).
	ChatKwargs map[string]any `json:"chatKwargs,omitempty"`
	// Speculative asks for speculative decoding (spec.go).
	Speculative *Speculation `json:"speculative,omitempty"`
	// Embed makes the job an embedding of PromptTokens (embed.go): the
	// last rank pools the prompt's normed hidden states, and nothing is
	// generated.
	Embed bool `json:"-"`

	// parse is how rank 0 splits the output (Prepare sets it).
	parse chatfmt.Options
}

// Validate checks the parameters that do not need the model.
func (r *Request) Validate() error {
	if len(r.Messages) == 0 && r.Prompt == "" && len(r.PromptTokens) == 0 {
		return fmt.Errorf("%w: no messages and no prompt", ErrBadRequest)
	}
	if r.TopLogprobs < 0 || r.TopLogprobs > MaxTopLogprobs {
		return fmt.Errorf("%w: top logprobs %d: want 0..%d", ErrBadRequest, r.TopLogprobs, MaxTopLogprobs)
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("%w: max_tokens %d: want ≥ 0", ErrBadRequest, r.MaxTokens)
	}
	if len(r.Stop) > MaxStop {
		return fmt.Errorf("%w: %d stop strings, at most %d", ErrBadRequest, len(r.Stop), MaxStop)
	}
	for _, s := range r.Stop {
		if s == "" || len(s) > MaxStopLen {
			return fmt.Errorf("%w: stop string of %d bytes: want 1..%d", ErrBadRequest, len(s), MaxStopLen)
		}
	}
	if err := r.Sample.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if r.Grammar != nil {
		if _, err := grammar.Compile(*r.Grammar); err != nil {
			return fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
	}
	if r.Speculative != nil {
		return r.Speculative.validate(r)
	}
	return nil
}

// logprobsN is how many top logprobs the last rank computes (-1: none).
func (r *Request) logprobsN() int {
	if !r.Logprobs {
		return -1
	}
	return r.TopLogprobs
}

// Piece is one generated token and the text it adds to the output (empty
// while a multi-byte character or a possible stop string is held back).
type Piece struct {
	Index int    `json:"index"`
	Token int32  `json:"token"`
	Text  string `json:"text"`
	// Logprobs is set when the request asked for them (not on the tail
	// and echo pieces, whose Token is -1).
	Logprobs *Logprobs `json:"logprobs,omitempty"`
	// Echo marks the piece holding the prompt's text (Request.Echo).
	Echo bool `json:"echo,omitempty"`
	// Reasoning and Calls are what the output parser (chatfmt) took out
	// of the text: reasoning, and tool calls, each whole once it parses.
	Reasoning string         `json:"reasoning,omitempty"`
	Calls     []chatfmt.Call `json:"calls,omitempty"`
	// Special is the text of a control token (never output), which some
	// formats mark calls and channels with; rank 0's parser reads it.
	Special string `json:"-"`
}

// Result is how a completion ended and what it cost.
type Result struct {
	// FinishReason is "stop" (end-of-generation token or stop string) or
	// "length" (max tokens or the context is full).
	FinishReason     string `json:"finishReason"`
	PromptTokens     int    `json:"promptTokens"`
	CompletionTokens int    `json:"completionTokens"`
	// CachedTokens of the prompt were found in the slot's cache (a
	// prefix of an earlier request's) and not computed again.
	CachedTokens int `json:"cachedTokens"`
	// Durations in nanoseconds: prefill (prompt processing up to the
	// first sampled token), decode (every later token), and time to the
	// first token from the start of Generate (tokenizing included).
	PrefillNs    int64 `json:"prefillNs"`
	DecodeNs     int64 `json:"decodeNs"`
	FirstTokenNs int64 `json:"firstTokenNs"`
	// DraftTokens were drafted by speculative decoding, of which
	// AcceptedDraftTokens were accepted.
	DraftTokens         int `json:"draftTokens,omitempty"`
	AcceptedDraftTokens int `json:"acceptedDraftTokens,omitempty"`
	// Embedding is an embedding job's pooled, L2-normalised vector.
	Embedding []float32 `json:"embedding,omitempty"`
}

// PrefillTokPerSec and DecodeTokPerSec are the throughputs (0 if unknown);
// prefill counts the prompt tokens computed, not those found cached.
func (r Result) PrefillTokPerSec() float64 { return perSec(r.PromptTokens-r.CachedTokens, r.PrefillNs) }

// DecodeTokPerSec counts the tokens after the first, which prefill made.
func (r Result) DecodeTokPerSec() float64 { return perSec(r.CompletionTokens-1, r.DecodeNs) }

func perSec(n int, ns int64) float64 {
	if n <= 0 || ns <= 0 {
		return 0
	}
	return float64(n) / (float64(ns) / 1e9)
}

// Generator prepares requests for one model, and runs one at a time
// (Generate) for benchmarks and tests; a Server's Scheduler runs many.
type Generator struct {
	M   Engine
	Tok *model.Tokenizer
	// TraceID names the ranks' traces of Generate's request.
	TraceID string
	// ContextShift accepts a max_tokens past the context (the scheduler
	// then shifts it; see Scheduler.ContextShift).
	ContextShift bool
}

// Prepare renders and tokenizes a request's prompt, and checks that it
// fits the context.
func (g *Generator) Prepare(req *Request) ([]int32, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if len(req.PromptTokens) > 0 {
		if err := g.checkTokens("prompt token", req.PromptTokens); err != nil {
			return nil, err
		}
		return g.fits(req, req.PromptTokens)
	}
	text := req.Prompt
	if len(req.Messages) > 0 {
		var err error
		if text, err = g.chat(req); err != nil {
			return nil, err
		}
	}
	ids, err := g.Tok.Encode(text, true)
	if err != nil {
		return nil, fmt.Errorf("%w: tokenize: %v", ErrBadRequest, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: the prompt has no tokens", ErrBadRequest)
	}
	return g.fits(req, ids)
}

// checkTokens refuses ids outside the vocabulary, naming the first as
// what and its index.
func (g *Generator) checkTokens(what string, ids []int32) error {
	n := g.Tok.VocabSize()
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("%w: %s %d is %d: want 0..%d", ErrBadRequest, what, i, id, n-1)
		}
	}
	return nil
}

// fits checks that the prompt ids and the completion req asks for fit the
// context.
func (g *Generator) fits(req *Request, ids []int32) ([]int32, error) {
	ctxLen := g.M.Options().ContextLen
	if len(ids) >= ctxLen {
		return nil, fmt.Errorf("%w: the prompt is %d tokens and the context holds %d (with room for at least one generated token)",
			ErrPromptTooLong, len(ids), ctxLen)
	}
	if len(ids)+req.MaxTokens > ctxLen && !g.ContextShift {
		return nil, fmt.Errorf("%w: max_tokens %d after a prompt of %d tokens needs %d positions and the context holds %d (start the agent with --context-shift to generate past it)",
			ErrPromptTooLong, req.MaxTokens, len(ids), len(ids)+req.MaxTokens, ctxLen)
	}
	return ids, nil
}

// Generate runs one request alone (prompt from Prepare), its cache
// empty, calling emit for every piece. rec (may be nil) gets a "prefill"
// span with "compute" children per batch and a "sample" child, and a
// "decode" span per later token with the same children, each carrying its
// token index. An error from emit stops generation and is returned.
func (g *Generator) Generate(ctx context.Context, req *Request, prompt []int32, rec *trace.Recorder, emit func(Piece) error) (Result, error) {
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
func (o *output) add(tok *model.Tokenizer, id int32) (Piece, bool) {
	if o.done {
		return Piece{}, true
	}
	if tok.EndsGeneration(id) && !o.ignoreEOS {
		o.done = true
		return Piece{Text: o.flush()}, true
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
			return Piece{Text: validPrefix(text[:i])}, true
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
	return Piece{Text: validPrefix(text[:cut]), Special: special}, false
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
