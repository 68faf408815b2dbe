package main

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// LangChain JS works unchanged against an agent, given only the base URL:
// @langchain/openai's ChatOpenAI (a chat, a stream, a tool bound from a zod
// schema and forced by name) and @langchain/ollama's ChatOllama (a chat, a
// stream). Greedy, so each stream says what its one-shot said.
func TestLangChainClient(t *testing.T) {
	p, modelID, node := startSDKAgent(t, "@langchain/openai")
	out := runNode(t, node, "langchain.mjs", "http://"+p.addr, modelID)
	t.Logf("langchain: %s", out)
	var got struct {
		OpenAI struct {
			Text   string `json:"text"`
			Finish string `json:"finish"`
			Tokens int    `json:"tokens"`
		} `json:"openai"`
		OpenAIStream struct {
			Text   string `json:"text"`
			Chunks int    `json:"chunks"`
		} `json:"openaiStream"`
		ToolCalls []struct {
			Name string `json:"name"`
			Args struct {
				City string `json:"city"`
				Unit string `json:"unit"`
			} `json:"args"`
		} `json:"toolCalls"`
		Ollama struct {
			Text   string `json:"text"`
			Tokens int    `json:"tokens"`
		} `json:"ollama"`
		OllamaStream struct {
			Text string `json:"text"`
		} `json:"ollamaStream"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %s: %v", out, err)
	}
	if o := got.OpenAI; o.Text == "" || o.Finish != "length" || o.Tokens != 8 {
		t.Errorf("ChatOpenAI.invoke: %+v, want 8 tokens of text, finish length", o)
	}
	if s := got.OpenAIStream; s.Text != got.OpenAI.Text || s.Chunks < 3 {
		t.Errorf("ChatOpenAI.stream: %+v; the greedy one-shot said %q", s, got.OpenAI.Text)
	}
	if len(got.ToolCalls) != 1 || got.ToolCalls[0].Name != "get_weather" || utf8.RuneCountInString(got.ToolCalls[0].Args.City) > 10 ||
		(got.ToolCalls[0].Args.Unit != "c" && got.ToolCalls[0].Args.Unit != "f") {
		t.Errorf("forced tool call: %+v, want one get_weather with the schema's arguments", got.ToolCalls)
	}
	if o := got.Ollama; o.Text == "" || o.Tokens != 8 {
		t.Errorf("ChatOllama.invoke: %+v, want 8 tokens of text", o)
	}
	if got.OllamaStream.Text != got.Ollama.Text {
		t.Errorf("ChatOllama.stream said %q, the greedy one-shot %q", got.OllamaStream.Text, got.Ollama.Text)
	}
}

// The Vercel AI SDK (ai with @ai-sdk/openai-compatible) works unchanged,
// given only the base URL: streamed text, generated text and a forced
// tool call.
func TestVercelAIClient(t *testing.T) {
	p, modelID, node := startSDKAgent(t, "ai")
	out := runNode(t, node, "vercel-ai.mjs", "http://"+p.addr, modelID)
	t.Logf("vercel ai: %s", out)
	var got struct {
		Stream struct {
			Text   string `json:"text"`
			Parts  int    `json:"parts"`
			Finish string `json:"finish"`
			Usage  struct {
				OutputTokens int `json:"outputTokens"`
			} `json:"usage"`
		} `json:"stream"`
		Generate struct {
			Text         string `json:"text"`
			Finish       string `json:"finish"`
			OutputTokens int    `json:"outputTokens"`
		} `json:"generate"`
		ToolCalls []struct {
			Name  string `json:"name"`
			Input struct {
				City string `json:"city"`
				Unit string `json:"unit"`
			} `json:"input"`
		} `json:"toolCalls"`
		ToolFinish string `json:"toolFinish"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %s: %v", out, err)
	}
	if s := got.Stream; s.Text == "" || s.Parts < 3 || s.Finish != "length" || s.Usage.OutputTokens != 8 {
		t.Errorf("streamText: %+v, want 8 tokens in parts, finish length", s)
	}
	if g := got.Generate; g.Text != got.Stream.Text || g.Finish != "length" || g.OutputTokens != 8 {
		t.Errorf("generateText: %+v; the greedy stream said %q", g, got.Stream.Text)
	}
	// Parallel calls are allowed (the SDK does not turn them off), so the
	// model may make more than one: each must be get_weather with the
	// schema's arguments.
	if len(got.ToolCalls) == 0 || got.ToolFinish != "tool-calls" {
		t.Errorf("forced tool call: %+v (finish %q), want get_weather", got.ToolCalls, got.ToolFinish)
	}
	for _, c := range got.ToolCalls {
		if c.Name != "get_weather" || (c.Input.Unit != "c" && c.Input.Unit != "f") || utf8.RuneCountInString(c.Input.City) > 10 {
			t.Errorf("tool call %+v: want get_weather with the schema's arguments", c)
		}
	}
}
