package chatstream

import (
	"strings"
	"testing"
)

func TestReadChatStream(t *testing.T) {
	ok := ": keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"he\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{}}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2},\"orrery\":{\"decodeTokPerSec\":9.5}}\n\ndata: [DONE]\n\n"
	var text strings.Builder
	var last Chunk
	if err := Read(strings.NewReader(ok), func(c Chunk) { text.WriteString(c.Content()); last = c }); err != nil {
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
		err := Read(strings.NewReader(in), func(Chunk) {})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", in, err, want)
		}
	}
}

// FuzzRead: any byte stream ends in nil or an error, never a panic; text
// comes only from chunks that decoded.
func FuzzRead(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"error\":{\"message\":\"x\"}}\n\n")
	f.Add("data: {\"usage\":null,\"orrery\":{}}\n\ndata: [DONE]")
	f.Add(": c\n\ndata: {")
	f.Fuzz(func(t *testing.T, in string) {
		n := 0
		err := Read(strings.NewReader(in), func(c Chunk) {
			n++
			if c.Error != nil {
				t.Fatalf("an error chunk reached the callback: %+v", c)
			}
		})
		if err == nil && !strings.Contains(in, "data: [DONE]") {
			t.Fatalf("nil error without [DONE] in %q", in)
		}
		if n > strings.Count(in, "data:") {
			t.Fatalf("%d chunks from %d data lines", n, strings.Count(in, "data:"))
		}
	})
}
