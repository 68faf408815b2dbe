package runnerapi

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/grammar"
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

// Request is one completion: chat messages (rendered with the model's
// template), a raw prompt, or the prompt's token ids.
type Request struct {
	Messages []Message `json:"messages,omitempty"`
	Prompt   string    `json:"prompt,omitempty"`
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
	Reasoning string `json:"reasoning,omitempty"`
	Calls     []Call `json:"calls,omitempty"`
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

func perSec(n int, ns int64) float64 {
	if n <= 0 || ns <= 0 {
		return 0
	}
	return float64(n) / (float64(ns) / 1e9)
}

// CompletionRequest is POST /completion: a request, traced when TraceID
// is set.
type CompletionRequest struct {
	Request
	TraceID string `json:"traceId,omitempty"`
}

// StreamMsg is one line of /completion's NDJSON answer: a piece, the end
// (with the spans the request recorded), or an error after the stream
// began.
type StreamMsg struct {
	Piece *Piece `json:"piece,omitempty"`
	Done  *Done  `json:"done,omitempty"`
	Error string `json:"error,omitempty"`
}

// Done ends a completion stream.
type Done struct {
	Result
	Spans []trace.Span `json:"spans,omitempty"`
	// Counters are rank 0's counter samples: the bytes its outbound link
	// sent (LinkCounter), sampled while the request ran.
	Counters []trace.CounterSample `json:"counters,omitempty"`
	// QueueNs is how long the request waited for the ones before it.
	QueueNs int64 `json:"queueNs"`
}

// ErrorBody is the JSON of an error answered before streaming; Kind is
// "prompt_too_long", "bad_request" or "not_ready".
type ErrorBody struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
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

// PrefillTokPerSec and DecodeTokPerSec are the throughputs (0 if unknown);
// prefill counts the prompt tokens computed, not those found cached.
func (r Result) PrefillTokPerSec() float64 { return perSec(r.PromptTokens-r.CachedTokens, r.PrefillNs) }

// DecodeTokPerSec counts the tokens after the first, which prefill made.
func (r Result) DecodeTokPerSec() float64 { return perSec(r.CompletionTokens-1, r.DecodeNs) }
