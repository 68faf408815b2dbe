package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The official @anthropic-ai/sdk (1.10.0) works unchanged against an
// agent: a message; a streamed one whose forced tool call the SDK's
// stream helper assembles from the events (its input holds the schema,
// from a random-weight model); the call's result sent back; and
// Anthropic's error shape for a request without max_tokens and an image.
func TestAnthropicSDK(t *testing.T) {
	p, modelID, node := startSDKAgent(t, "@anthropic-ai/sdk")
	out := runNode(t, node, "anthropic.mjs", "http://"+p.addr, modelID)
	t.Logf("anthropic sdk: %s", out)
	type block struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	type apiErr struct {
		Status  int    `json:"status"`
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	var got struct {
		Plain struct {
			Content    []block `json:"content"`
			StopReason string  `json:"stopReason"`
			Usage      struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
			ID string `json:"id"`
		} `json:"plain"`
		Tool struct {
			Content    []block  `json:"content"`
			StopReason string   `json:"stopReason"`
			Events     []string `json:"events"`
		} `json:"tool"`
		Answer struct {
			StopReason      string `json:"stopReason"`
			InputTokens     int    `json:"inputTokens"`
			ToolInputTokens int    `json:"toolInputTokens"`
		} `json:"answer"`
		Missing *apiErr `json:"missing"`
		Image   *apiErr `json:"image"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sdk output %s: %v", out, err)
	}
	pl := got.Plain
	if len(pl.Content) != 1 || pl.Content[0].Type != "text" || pl.Content[0].Text == "" || pl.StopReason != "max_tokens" ||
		pl.Usage.OutputTokens != 12 || pl.Usage.InputTokens == 0 || !strings.HasPrefix(pl.ID, "msg_") {
		t.Errorf("message: %+v", pl)
	}
	tl := got.Tool
	var use *block
	for i := range tl.Content {
		if tl.Content[i].Type == "tool_use" {
			use = &tl.Content[i]
		}
	}
	var in struct {
		City *string `json:"city"`
		Unit string  `json:"unit"`
	}
	if use == nil || use.Name != "get_weather" || !strings.HasPrefix(use.ID, "toolu_") || json.Unmarshal(use.Input, &in) != nil ||
		in.City == nil || len([]rune(*in.City)) > 10 || (in.Unit != "c" && in.Unit != "f") || tl.StopReason != "tool_use" {
		t.Errorf("streamed tool call: %+v", tl)
	}
	for _, e := range []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"} {
		if !slices.Contains(tl.Events, e) {
			t.Errorf("stream events %v lack %s", tl.Events, e)
		}
	}
	if a := got.Answer; a.StopReason == "" || a.ToolInputTokens == 0 || a.InputTokens <= a.ToolInputTokens {
		t.Errorf("the tool result sent back: %+v", a)
	}
	if m := got.Missing; m == nil || m.Status != http.StatusBadRequest || m.Type != "invalid_request_error" || !strings.Contains(m.Message, "max_tokens") {
		t.Errorf("no max_tokens: %+v", m)
	}
	if m := got.Image; m == nil || m.Status != http.StatusBadRequest || !strings.Contains(m.Message, "image blocks are not supported") {
		t.Errorf("an image: %+v", m)
	}
}
