// Package chatstream reads OpenAI chat-completion SSE streams as Orrery
// serves them (text deltas, then usage and the orrery timings).
package chatstream

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Chunk is what the CLI reads of one chat-completion stream chunk: the
// text delta, and on the last chunk usage and Orrery's timings.
type Chunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Orrery *struct {
		PrefillTokPerSec    float64 `json:"prefillTokPerSec"`
		DecodeTokPerSec     float64 `json:"decodeTokPerSec"`
		TimeToFirstTokenMs  float64 `json:"timeToFirstTokenMs"`
		DraftTokens         int     `json:"draftTokens"`
		AcceptedDraftTokens int     `json:"acceptedDraftTokens"`
	} `json:"orrery"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// MaxLine bounds one line of the stream.
const MaxLine = 1 << 20

// Content is the chunk's text delta ("" when none).
func (c Chunk) Content() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Delta.Content
}

// Reasoning is the chunk's reasoning delta ("" when none).
func (c Chunk) Reasoning() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Delta.ReasoningContent
}

// Read reads an SSE chat-completion stream until [DONE], calling
// onChunk with each chunk. An error event, an undecodable chunk or a stream
// that ends without [DONE] is an error.
func Read(r io.Reader, onChunk func(Chunk)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return nil
		}
		var c Chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return fmt.Errorf("chat stream: %w", err)
		}
		if c.Error != nil {
			return fmt.Errorf("chat stream: %s", c.Error.Message)
		}
		onChunk(c)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("chat stream: %w", err)
	}
	return errors.New("chat stream ended without [DONE]")
}
