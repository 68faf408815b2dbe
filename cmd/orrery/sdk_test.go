package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// sdkDir holds the npm project whose openai SDK drives the API; make deps
// (scripts/deps.sh) installs its node_modules.
const sdkDir = "../../test/sdk"

// The official openai npm SDK streams a completion from
// /v1/chat/completions (and makes a non-streaming one and lists models).
func TestOpenAISDK(t *testing.T) {
	p, modelID, node := startSDKAgent(t, "openai")
	out := runNode(t, node, "chat.mjs", "http://"+p.addr+"/v1", modelID)
	var got struct {
		TraceID      string `json:"traceId"`
		ContentType  string `json:"contentType"`
		Chunks       int    `json:"chunks"`
		Text         string `json:"text"`
		FinishReason string `json:"finishReason"`
		Usage        *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		NonStreaming struct {
			Text string `json:"text"`
		} `json:"nonStreaming"`
		Models []string `json:"models"`
		Legacy struct {
			Text  string `json:"text"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Logprobs *struct {
				Tokens        []string             `json:"tokens"`
				TokenLogprobs []float64            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			} `json:"logprobs"`
			StreamText     string `json:"streamText"`
			StreamLogprobs int    `json:"streamLogprobs"`
		} `json:"legacy"`
		Structured []struct {
			Content      string          `json:"content"`
			Parsed       json.RawMessage `json:"parsed"`
			FinishReason string          `json:"finishReason"`
		} `json:"structured"`
		BadSchema *struct {
			Status  int    `json:"status"`
			Message string `json:"message"`
		} `json:"badSchema"`
		Tools sdkTools `json:"tools"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sdk output %s: %v", out, err)
	}
	t.Logf("sdk: %s", out)
	if got.Chunks < 3 || got.FinishReason == "" || got.Usage == nil || got.Usage.CompletionTokens == 0 || got.Usage.PromptTokens == 0 {
		t.Errorf("stream: %+v", got)
	}
	if !strings.HasPrefix(got.ContentType, "text/event-stream") || got.TraceID == "" {
		t.Errorf("content type %q, trace id %q", got.ContentType, got.TraceID)
	}
	if got.Text != got.NonStreaming.Text {
		t.Errorf("greedy stream %q differs from the non-streaming answer %q", got.Text, got.NonStreaming.Text)
	}
	if len(got.Models) != 1 || got.Models[0] != modelID {
		t.Errorf("models %v", got.Models)
	}
	// Legacy completions: logprobs per generated token, the stream the
	// same as the single answer.
	lg := got.Legacy
	if lg.Usage == nil || lg.Logprobs == nil || len(lg.Logprobs.TokenLogprobs) != lg.Usage.CompletionTokens ||
		len(lg.Logprobs.TopLogprobs) != lg.Usage.CompletionTokens || lg.StreamText != lg.Text || lg.StreamLogprobs != lg.Usage.CompletionTokens {
		t.Errorf("legacy completions: %+v", lg)
	}
	// Structured output through the SDK's parse() and zod: a random-weight
	// model's answers parse (the SDK validates them with zod itself and
	// throws if not) and hold the schema's values.
	if len(got.Structured) != 3 {
		t.Errorf("structured answers: %d, want 3", len(got.Structured))
	}
	for i, st := range got.Structured {
		var w struct {
			City *string  `json:"city"`
			Unit string   `json:"unit"`
			Days *int64   `json:"days"`
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(st.Parsed, &w); err != nil || w.City == nil || w.Days == nil || (w.Unit != "celsius" && w.Unit != "fahrenheit") ||
			len(w.Tags) > 2 || st.FinishReason != "stop" {
			t.Errorf("structured answer %d: %+v (%v)", i, st, err)
		}
	}
	if b := got.BadSchema; b == nil || b.Status != http.StatusBadRequest || !strings.Contains(b.Message, "/properties/a/pattern") {
		t.Errorf("a schema with a pattern: %+v, want a 400 naming /properties/a/pattern", b)
	}
	checkSDKTools(t, got.Tools)
	poll(t, p, 10*time.Second, "the streamed request's trace", func() (bool, string) {
		code, body, _ := p.get("/v1/traces/" + got.TraceID)
		return code == http.StatusOK, string(body)
	})
}

// sdkTools is what chat.mjs saw of tool calls.
type sdkTools struct {
	Forced struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finishReason"`
	} `json:"forced"`
	RoundTrip struct {
		FinishReason       string `json:"finishReason"`
		PromptTokens       int    `json:"promptTokens"`
		ForcedPromptTokens int    `json:"forcedPromptTokens"`
	} `json:"roundTrip"`
	Stream struct {
		Calls []struct {
			ID, Name, Arguments string
		} `json:"calls"`
		FinishReason string `json:"finishReason"`
	} `json:"stream"`
	Named []string `json:"named"`
}

// checkSDKTools: the forced calls name a tool with arguments of its
// schema, in one answer and streamed; the call sent back with its result
// renders into a longer prompt and is answered; a named tool_choice calls
// that tool.
func checkSDKTools(t *testing.T, got sdkTools) {
	t.Helper()
	weather := func(what, name, args string) {
		var a struct {
			City *string `json:"city"`
			Unit string  `json:"unit"`
		}
		dec := json.NewDecoder(strings.NewReader(args))
		dec.DisallowUnknownFields()
		if name != "get_weather" && name != "get_time" {
			t.Errorf("%s: called %q", what, name)
		}
		if name == "get_weather" && (dec.Decode(&a) != nil || a.City == nil || len([]rune(*a.City)) > 10 || (a.Unit != "c" && a.Unit != "f")) {
			t.Errorf("%s: arguments %q break the schema", what, args)
		}
	}
	f := got.Forced
	if len(f.Message.ToolCalls) != 1 || f.FinishReason != "tool_calls" || f.Message.Content != nil || f.Message.ToolCalls[0].Type != "function" ||
		!strings.HasPrefix(f.Message.ToolCalls[0].ID, "call_") {
		t.Errorf("forced call: %+v", f)
	} else {
		weather("forced call", f.Message.ToolCalls[0].Function.Name, f.Message.ToolCalls[0].Function.Arguments)
	}
	if rt := got.RoundTrip; rt.FinishReason == "" || rt.PromptTokens <= rt.ForcedPromptTokens {
		t.Errorf("round trip with the call and its result: %+v", rt)
	}
	s := got.Stream
	if len(s.Calls) == 0 || s.FinishReason != "tool_calls" {
		t.Errorf("streamed call: %+v", s)
	}
	for _, c := range s.Calls {
		weather("streamed call", c.Name, c.Arguments)
	}
	if len(got.Named) != 1 || got.Named[0] != "get_time" {
		t.Errorf("tool_choice get_time called %v", got.Named)
	}
}

// startSDKAgent starts an agent serving a random-weight tiny model (with
// room in its context for tools), placed and ready, and finds node and
// the npm packages the client scripts need.
func startSDKAgent(t *testing.T, pkg string) (p *agentProc, modelID, node string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed for the client tests: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", pkg, "package.json")); err != nil {
		t.Fatalf("the %s client is not installed (run make deps, or npm ci in test/sdk): %v", pkg, err)
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	modelID = genModel(t, bin, dir, "tiny-sdk", "--preset", "tiny", "--ctx", "2048") // room for the tools in the prompt
	p = startAgentEnv(t, bin, testutil.FreeAddr(t), dir, []string{"HOME=" + dir}, "--loopback-dir", t.TempDir())
	waitHealthy(t, p)
	if code, body, err := p.post("/instance", `{"model":"`+modelID+`"}`); err != nil || code != http.StatusCreated {
		t.Fatalf("POST /instance = %d %s %v", code, body, err)
	}
	poll(t, p, 30*time.Second, "a ready runner", func() (bool, string) {
		_, body, _ := p.get("/state/runners")
		return strings.Contains(string(body), `"status":"Ready"`), string(body)
	})
	return p, modelID, node
}

// runNode runs a client script of test/sdk and returns its stdout.
func runNode(t *testing.T, node, script string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(node, append([]string{script}, args...)...)
	cmd.Dir = sdkDir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node %s: %v\n%s\n%s", script, err, out, stderr)
	}
	return out
}
