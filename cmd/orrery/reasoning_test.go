package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// thinkingTemplate opens a <think> block at the end of the prompt unless
// enable_thinking is false, as Qwen 3's template does (where false writes
// an empty block instead).
const thinkingTemplate = `{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}` +
	`{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}` +
	`{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\n\n</think>\n\n' }}{% else %}{{ '<think>\n' }}{% endif %}{% endif %}`

// A model whose template opens a <think> block (a random-weight model, so
// it never closes it in 8 tokens) answers with reasoning only, in each
// protocol's field: OpenAI's reasoning_content (whole and streamed),
// Ollama's thinking, Anthropic's thinking block. With thinking turned
// off (enable_thinking, think: false, thinking disabled) the template
// closes the block and the same tokens are content.
func TestReasoningProtocols(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "thinking.jinja")
	if err := os.WriteFile(tmpl, []byte(thinkingTemplate), 0o600); err != nil {
		t.Fatal(err)
	}
	modelID := genModel(t, bin, dir, "tiny-think", "--preset", "tiny", "--chat-template", tmpl)
	p := startAgentEnv(t, bin, testutil.FreeAddr(t), dir, []string{"HOME=" + dir}, "--loopback-dir", t.TempDir())
	waitHealthy(t, p)
	if code, body, err := p.post("/instance", `{"model":"`+modelID+`"}`); err != nil || code != http.StatusCreated {
		t.Fatalf("POST /instance = %d %s %v", code, body, err)
	}
	poll(t, p, 30*time.Second, "a ready runner", func() (bool, string) {
		_, body, _ := p.get("/state/runners")
		return strings.Contains(string(body), `"status":"Ready"`), string(body)
	})
	post := func(path, body string, v any) {
		t.Helper()
		code, b, err := p.post(path, body)
		if err != nil || code != http.StatusOK {
			t.Fatalf("POST %s = %d %s %v", path, code, b, err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("POST %s: %s: %v", path, b, err)
		}
	}
	const msgs = `"messages":[{"role":"user","content":"think about it"}]`
	for _, thinking := range []bool{true, false} {
		var oa struct {
			Choices []struct {
				Message struct {
					Content   string `json:"content"`
					Reasoning string `json:"reasoning_content"`
				} `json:"message"`
			} `json:"choices"`
		}
		flag := map[bool]string{true: "", false: `,"chat_template_kwargs":{"enable_thinking":false}`}[thinking]
		post("/v1/chat/completions", `{"model":"`+modelID+`",`+msgs+`,"max_tokens":8,"temperature":0`+flag+`}`, &oa)
		m := oa.Choices[0].Message
		if thinking && (m.Reasoning == "" || m.Content != "") || !thinking && (m.Reasoning != "" || m.Content == "") {
			t.Errorf("openai, thinking %v: %+v", thinking, m)
		}
		var ol struct {
			Message struct {
				Content  string `json:"content"`
				Thinking string `json:"thinking"`
			} `json:"message"`
		}
		post("/api/chat", `{"model":"`+modelID+`",`+msgs+`,"stream":false,"think":`+map[bool]string{true: "true", false: "false"}[thinking]+
			`,"options":{"num_predict":8,"temperature":0}}`, &ol)
		if ol.Message.Thinking != m.Reasoning || ol.Message.Content != m.Content {
			t.Errorf("ollama, thinking %v: %+v, openai said %+v", thinking, ol.Message, m)
		}
		var an struct {
			Content []struct {
				Type     string `json:"type"`
				Text     string `json:"text"`
				Thinking string `json:"thinking"`
			} `json:"content"`
		}
		post("/v1/messages", `{"model":"`+modelID+`",`+msgs+`,"max_tokens":8,"temperature":0,"thinking":{"type":"`+
			map[bool]string{true: "enabled", false: "disabled"}[thinking]+`"}}`, &an)
		want := map[bool]string{true: "thinking", false: "text"}[thinking]
		if len(an.Content) != 1 || an.Content[0].Type != want || an.Content[0].Thinking+an.Content[0].Text != m.Reasoning+m.Content {
			t.Errorf("anthropic, thinking %v: %+v, want one %s block of %q", thinking, an.Content, want, m.Reasoning+m.Content)
		}
	}
	// Streamed, the reasoning comes as delta.reasoning_content.
	code, b, err := p.post("/v1/chat/completions", `{"model":"`+modelID+`",`+msgs+`,"max_tokens":8,"temperature":0,"stream":true}`)
	if err != nil || code != http.StatusOK || !strings.Contains(string(b), `"reasoning_content":`) || strings.Contains(string(b), `<think>`) {
		t.Errorf("streamed reasoning: %d %s %v", code, b, err)
	}
}
