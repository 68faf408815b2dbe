package runnerapi

// MaxTopLogprobs bounds the alternatives reported per token (OpenAI's
// legacy completions allow 5, its chat completions 20).
const MaxTopLogprobs = 20

// TokenLogprob is one token and its log probability. Text is the token's
// text, filled in on rank 0 (the link carries ids only).
type TokenLogprob struct {
	Token   int32   `json:"token"`
	Logprob float32 `json:"logprob"`
	Text    string  `json:"text"`
}

// Logprobs are a sampled token's log probability and the most likely
// tokens at its position, most likely first: the log-softmax of the raw
// logits, before temperature and filtering (as llama.cpp's n_probs).
type Logprobs struct {
	TokenLogprob
	Top []TokenLogprob `json:"top,omitempty"`
}
