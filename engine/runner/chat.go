package runner

import (
	"encoding/json"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/chatfmt"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// toolsOf reads the name and parameters of each tool of OpenAI's tools
// array.
func toolsOf(raw json.RawMessage) ([]chatfmt.Tool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var ts []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil, fmt.Errorf("tools: %v", err)
	}
	out := make([]chatfmt.Tool, len(ts))
	for i, t := range ts {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d]: want {type: \"function\", function: {name, parameters}}", i)
		}
		out[i] = chatfmt.Tool{Name: t.Function.Name, Parameters: t.Function.Parameters}
	}
	return out, nil
}

// pieceParser splits the pieces' text into content, reasoning and tool
// calls (when the request's options ask for it) on their way out.
type pieceParser struct {
	p        *chatfmt.Parser
	specials bool // the format reads control tokens' text
	send     func(*runnerapi.Piece) error
	last     int
}

func newPieceParser(o chatfmt.Options, send func(*runnerapi.Piece) error) *pieceParser {
	pp := &pieceParser{send: send, specials: o.Format.Specials()}
	if o.Active() {
		pp.p = chatfmt.NewParser(o)
	}
	return pp
}

func (pp *pieceParser) emit(p runnerapi.Piece) error {
	if pp.p != nil && !p.Echo {
		text := p.Text
		if pp.specials {
			text += p.Special
		}
		d := pp.p.Add(text)
		p.Text, p.Reasoning, p.Calls = d.Content, d.Reasoning, d.Calls
	}
	pp.last = p.Index
	return pp.send(&p)
}

// flush sends what the parser held back at the end, as one more piece.
func (pp *pieceParser) flush() {
	if pp.p == nil {
		return
	}
	if d := pp.p.Flush(); d.Content != "" || d.Reasoning != "" || len(d.Calls) > 0 {
		pp.send(&runnerapi.Piece{Index: pp.last + 1, Token: -1, Text: d.Content, Reasoning: d.Reasoning, Calls: d.Calls})
	}
}
