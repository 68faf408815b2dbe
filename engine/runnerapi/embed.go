package runnerapi

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// MaxEmbedInputs bounds the inputs of one embedding request (OpenAI's
// limit for an input array).
const MaxEmbedInputs = 2048

// EmbedRequest asks for one vector per input.
type EmbedRequest struct {
	Inputs []EmbedInput `json:"inputs"`
	// Truncate cuts an input longer than the context to its first
	// ContextLen tokens (Ollama's default) instead of refusing it.
	Truncate bool `json:"truncate,omitempty"`
	// Dimensions > 0 keeps each vector's first Dimensions values,
	// normalised again (Matryoshka embeddings, as OpenAI's dimensions);
	// at most the model's width.
	Dimensions int `json:"dimensions,omitempty"`
	// TraceID names rank 0's trace of the request ("" for none).
	TraceID string `json:"traceId,omitempty"`
}

// EmbedInput is a text (tokenized as llama-embedding does: the model's BOS
// and EOS added as it asks) or token ids used as they are.
type EmbedInput struct {
	Text   string  `json:"text,omitempty"`
	Tokens []int32 `json:"tokens,omitempty"`
}

// EmbedResponse is the inputs' vectors, in order.
type EmbedResponse struct {
	Embeddings []Vector `json:"embeddings"`
	// PromptTokens counts every input's tokens.
	PromptTokens int `json:"promptTokens"`
	// Ns is the time from the request to the last vector.
	Ns int64 `json:"ns"`
	// Spans and Counters are rank 0's trace when TraceID was set.
	Spans    []trace.Span          `json:"spans,omitempty"`
	Counters []trace.CounterSample `json:"counters,omitempty"`
}

// Vector is an embedding. In JSON it is the base64 of its little-endian
// float32s (as OpenAI's encoding_format base64): exact, and a third of
// the bytes of decimal text.
type Vector []float32

func (v Vector) MarshalJSON() ([]byte, error) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return json.Marshal(b)
}

func (v *Vector) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("embedding: %w", err)
	}
	if len(b)%4 != 0 {
		return fmt.Errorf("embedding of %d bytes: not float32s", len(b))
	}
	*v = make(Vector, len(b)/4)
	for i := range *v {
		(*v)[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

// Truncate keeps v's first d values, L2-normalised again.
func (v Vector) Truncate(d int) Vector {
	if d <= 0 || d >= len(v) {
		return v
	}
	return L2Normalize(v[:d])
}

// L2Normalize is v over its Euclidean norm, as llama.cpp's
// common_embd_normalize computes it (the norm in float64); zeros for a
// zero vector.
func L2Normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x * x)
	}
	norm := float32(0)
	if sum = math.Sqrt(sum); sum > 0 {
		norm = float32(1 / sum)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x * norm
	}
	return out
}
