package main

import (
	"strings"
	"testing"
)

func TestReadChatStream(t *testing.T) {
	ok := ": keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"he\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{}}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2},\"orrery\":{\"decodeTokPerSec\":9.5}}\n\ndata: [DONE]\n\n"
	var text strings.Builder
	var last chatChunk
	if err := readChatStream(strings.NewReader(ok), func(c chatChunk) { text.WriteString(c.Content()); last = c }); err != nil {
		t.Fatal(err)
	}
	if text.String() != "hello" || last.Usage == nil || last.Usage.CompletionTokens != 2 || last.Orrery.DecodeTokPerSec != 9.5 {
		t.Errorf("text %q, last %+v", text.String(), last)
	}
	for in, want := range map[string]string{
		"data: {\"choices\":[]}\n\n":                                   "ended without [DONE]",
		"data: {\"error\":{\"message\":\"node n2 broke off\"}}\n\n":    "chat stream: node n2 broke off",
		"data: {nope\n\n":                                              "chat stream: invalid character",
		"data: " + strings.Repeat("x", 2<<20) + "\n\ndata: [DONE]\n\n": "token too long",
	} {
		err := readChatStream(strings.NewReader(in), func(chatChunk) {})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", in, err, want)
		}
	}
}
