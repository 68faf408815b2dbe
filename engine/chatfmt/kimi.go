package chatfmt

import (
	"encoding/json"
	"strings"
	"unicode"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Kimi K2's tool-call markers (control tokens of its vocabulary), as its
// chat template writes them and llama.cpp's common/parsers/kimi-k2.cpp
// reads them.
const (
	kimiSectionBegin = "<|tool_calls_section_begin|>"
	kimiSectionEnd   = "<|tool_calls_section_end|>"
	kimiCallBegin    = "<|tool_call_begin|>"
	kimiArgsBegin    = "<|tool_call_argument_begin|>"
	kimiCallEnd      = "<|tool_call_end|>"
)

// kimi reads Kimi K2's calls: <|tool_call_begin|>functions.name:0
// <|tool_call_argument_begin|>{…}<|tool_call_end|>, each, until
// <|tool_calls_section_end|>. As in llama.cpp, the section markers may be
// missing and so may the last call's end where the output ends.
func (p *Parser) kimi(final bool) (Delta, bool) {
	t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
	switch {
	case strings.HasPrefix(t, kimiSectionEnd):
		p.buf, p.mode, p.trim = t[len(kimiSectionEnd):], inText, true
		return Delta{}, true
	case strings.HasPrefix(t, kimiCallBegin):
		i := strings.Index(t, kimiCallEnd)
		body, rest := "", ""
		switch {
		case i >= 0:
			body, rest = t[len(kimiCallBegin):i], t[i+len(kimiCallEnd):]
		case !final && len(p.buf) < maxHeld:
			return Delta{}, false
		default:
			body = t[len(kimiCallBegin):] // the output ended in the call
		}
		c, ok := kimiCall(body, p.calls)
		if !ok {
			return p.kimiGiveUp()
		}
		p.calls++
		p.buf = rest
		return Delta{Calls: []runnerapi.Call{c}}, true
	case final && t == "" && p.calls > p.since:
		p.mode = inText // the calls ended with the output
		return Delta{}, false
	case !final && (t == "" || strings.HasPrefix(kimiCallBegin, t) || strings.HasPrefix(kimiSectionEnd, t)):
		return Delta{}, false
	}
	return p.kimiGiveUp()
}

// kimiGiveUp goes back to text: after calls, what follows them is text;
// before any, the marker that began the calls is written as content, as
// the model wrote it, and the rest is read again as text.
func (p *Parser) kimiGiveUp() (Delta, bool) {
	switch {
	case p.calls > p.since:
		p.mode, p.trim = inText, true
		return Delta{}, true
	case p.bare:
		p.buf = strings.TrimPrefix(p.buf, kimiCallBegin)
		return p.giveUp(kimiCallBegin)
	}
	return p.giveUp(kimiSectionBegin)
}

// kimiCall reads "functions.name:0<|tool_call_argument_begin|>{…}": the
// call id is functions.<name>:<counter>, and the name is what lies between.
func kimiCall(body string, index int) (runnerapi.Call, bool) {
	id, args, ok := strings.Cut(body, kimiArgsBegin)
	if !ok {
		return runnerapi.Call{}, false
	}
	name := strings.TrimPrefix(strings.TrimSpace(id), "functions.")
	if i := strings.LastIndexByte(name, ':'); i >= 0 && i+1 < len(name) && strings.Trim(name[i+1:], "0123456789") == "" {
		name = name[:i]
	}
	b, err := json.Marshal(map[string]any{"name": name, "arguments": json.RawMessage(strings.TrimSpace(args))})
	if err != nil {
		return runnerapi.Call{}, false
	}
	return parseCall(string(b), index)
}
