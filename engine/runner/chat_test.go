package runner

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/chatfmt"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A control token's text reaches the piece as Special, never as Text,
// and pending text is released before it.
func TestOutputSpecial(t *testing.T) {
	tok := tinyTokenizer(t)
	o := newOutput(nil)
	a := ids(t, tok, "hi")
	var text string
	for _, id := range a {
		p, _ := o.add(tok, id)
		text += p.Text
		if p.Special != "" {
			t.Errorf("token %d: special %q", id, p.Special)
		}
	}
	p, done := o.add(tok, 3) // <|im_start|>, a control token of generated models
	if done || p.Special != "<|im_start|>" || text+p.Text == "" {
		t.Errorf("control token: %+v (done %v), text so far %q", p, done, text)
	}
	if b, _ := json.Marshal(p); strings.Contains(string(b), "im_start") {
		t.Errorf("a control token's text travels to the agent: %s", b)
	}
}

// The piece parser gives a format that reads control tokens their text
// after the piece's text, and the parsed parts go out; others never see
// control tokens.
func TestPieceParserSpecials(t *testing.T) {
	pieces := []runnerapi.Piece{{Special: "<|channel|>"}, {Text: "analysis"}, {Special: "<|message|>"}, {Text: "hmm"}, {Special: "<|end|>"},
		{Special: "<|start|>"}, {Text: "assistant"}, {Special: "<|channel|>"}, {Text: "commentary to=functions.f json"},
		{Special: "<|message|>"}, {Text: `{"a": 1}`}}
	var got []runnerapi.Piece
	pp := newPieceParser(chatfmt.Options{Format: chatfmt.Harmony, Tools: true}, func(p *runnerapi.Piece) error { got = append(got, *p); return nil })
	for i, p := range pieces {
		p.Index = i
		if err := pp.emit(p); err != nil {
			t.Fatal(err)
		}
	}
	pp.flush()
	var reasoning, content string
	var calls []runnerapi.Call
	for _, p := range got {
		reasoning += p.Reasoning
		content += p.Text
		calls = append(calls, p.Calls...)
	}
	if reasoning != "hmm" || content != "" || !reflect.DeepEqual(calls, []runnerapi.Call{{Index: 0, Name: "f", Arguments: `{"a":1}`}}) {
		t.Errorf("harmony through pieces: reasoning %q, content %q, calls %+v", reasoning, content, calls)
	}
	if last := got[len(got)-1]; last.Index != len(pieces) || last.Token != -1 {
		t.Errorf("the flushed piece: %+v", last)
	}

	got = nil
	pp = newPieceParser(chatfmt.Options{Format: chatfmt.Hermes, Tools: true}, func(p *runnerapi.Piece) error { got = append(got, *p); return nil })
	pp.emit(runnerapi.Piece{Text: "a", Special: "<|im_start|>"})
	pp.emit(runnerapi.Piece{Text: "b"})
	pp.flush()
	content = ""
	for _, p := range got {
		content += p.Text
	}
	if content != "ab" {
		t.Errorf("hermes saw control tokens: %q", content)
	}
}
