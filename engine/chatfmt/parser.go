package chatfmt

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
	callOpen   = "<tool_call>"
	callClose  = "</tool_call>"
)

type mode int

const (
	inText     mode = iota
	inThink         // between <think> and </think>
	inCall          // after <tool_call>, until </tool_call>
	inJSON          // Llama 3: the answer began with '{'
	inMistral       // after [TOOL_CALLS]
	inDeepSeek      // after <｜tool▁calls▁begin｜>
	inKimi          // after <|tool_calls_section_begin|>, or at a <|tool_call_begin|> outside one
)

// Parser splits output, as it streams, into content, reasoning and tool
// calls. It holds back only what might still be a marker or an unfinished
// call: a call is emitted whole once it parses, and one that never parses
// comes out as content, as it was written. Not safe for concurrent use.
type Parser struct {
	o     Options
	mode  mode
	buf   string
	calls int
	// text: content other than space has been written (a Llama 3 call
	// must start the answer).
	text bool
	// trim drops the space that follows a reasoning block.
	trim bool
	// h is where a Harmony answer is.
	h harmonyState
	// since is the count of calls when the current block of calls began.
	since int
	// last is the text of the last Add.
	last string
	// bare: the Kimi calls began at a <|tool_call_begin|> with no
	// section opened, which buf still starts with.
	bare bool
}

// maxHeld bounds what a parser holds back: a call longer than this is
// given up on and written out as content.
const maxHeld = 1 << 20

// NewParser parses output under o.
func NewParser(o Options) *Parser {
	p := &Parser{o: o}
	if o.InThink {
		p.mode = inThink
	}
	return p
}

// Add takes the next piece of output and returns what it can tell so far.
func (p *Parser) Add(s string) Delta {
	p.buf += s
	p.last = s
	var d Delta
	for {
		out, more := p.step(false)
		d.add(out)
		if !more {
			return d
		}
	}
}

// Flush ends the output: whatever is held back comes out, as a call if it
// parses, else as it was written.
func (p *Parser) Flush() Delta {
	var d Delta
	for {
		out, more := p.step(true)
		d.add(out)
		if !more {
			return d
		}
	}
}

// step consumes what it can of buf; more reports that another step may
// consume more.
func (p *Parser) step(final bool) (Delta, bool) {
	if p.o.Format == Harmony {
		return p.harmony(final)
	}
	switch p.mode {
	case inMistral:
		return p.mistral(final)
	case inDeepSeek:
		return p.deepseek(final)
	case inKimi:
		return p.kimi(final)
	case inThink:
		return p.think(final)
	case inCall:
		return p.call(final)
	case inJSON:
		return p.json(final)
	}
	return p.plain(final)
}

func (p *Parser) content(s string) Delta {
	if p.trim {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			return Delta{}
		}
		p.trim = false
	}
	if strings.TrimSpace(s) != "" {
		p.text = true
	}
	return Delta{Content: s}
}

func (p *Parser) plain(final bool) (Delta, bool) {
	if p.o.Tools && p.o.Format == Llama3 && !p.text {
		t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
		if p.calls > 0 { // calls are separated by ';'
			t = strings.TrimLeftFunc(strings.TrimPrefix(t, ";"), unicode.IsSpace)
		}
		switch {
		case strings.HasPrefix(t, "{"):
			p.mode, p.buf = inJSON, t
			return Delta{}, true
		case t == "" && !final:
			return Delta{}, false // only space so far: the call may follow
		case t == "" && p.calls > 0:
			p.buf = "" // the separator after the last call
			return Delta{}, false
		}
	}
	var markers []string
	if p.o.Think {
		markers = append(markers, thinkOpen)
	}
	if p.o.Tools {
		switch p.o.Format {
		case Hermes:
			markers = append(markers, callOpen)
		case Mistral:
			markers = append(markers, mistralCalls)
		case DeepSeek:
			markers = append(markers, dsCallsBegin)
		case Kimi:
			markers = append(markers, kimiSectionBegin, kimiCallBegin)
		}
	}
	if at, which := firstMarker(p.buf, markers); at >= 0 {
		d := p.content(p.buf[:at])
		p.buf = p.buf[at+len(which):]
		switch which {
		case thinkOpen:
			p.mode = inThink
		case mistralCalls:
			p.mode = inMistral
		case dsCallsBegin:
			p.mode, p.since = inDeepSeek, p.calls
		case kimiSectionBegin:
			p.mode, p.since, p.bare = inKimi, p.calls, false
		case kimiCallBegin:
			// Kimi K2 may call with no section opened (llama.cpp
			// takes these too): the marker stays, for kimi to read.
			p.buf = which + p.buf
			p.mode, p.since, p.bare = inKimi, p.calls, true
		default:
			p.mode = inCall
		}
		return d, true
	}
	keep := 0
	if !final {
		keep = heldPrefix(p.buf, markers)
	}
	d := p.content(p.buf[:len(p.buf)-keep])
	p.buf = p.buf[len(p.buf)-keep:]
	return d, false
}

func (p *Parser) think(final bool) (Delta, bool) {
	ends := []string{thinkClose}
	if p.o.Tools && p.o.Format == Kimi {
		// Kimi K2 Thinking may call a tool without closing its
		// reasoning: a call ends it too, as in llama.cpp.
		ends = append(ends, kimiSectionBegin, kimiCallBegin)
	}
	if at, which := firstMarker(p.buf, ends); at >= 0 {
		d := Delta{Reasoning: p.buf[:at]}
		p.buf = p.buf[at:]
		if which == thinkClose {
			p.buf = p.buf[len(thinkClose):]
		}
		p.mode, p.trim = inText, true
		return d, true
	}
	keep := 0
	if !final {
		keep = heldPrefix(p.buf, ends)
	}
	d := Delta{Reasoning: p.buf[:len(p.buf)-keep]}
	p.buf = p.buf[len(p.buf)-keep:]
	return d, false
}

func (p *Parser) call(final bool) (Delta, bool) {
	i := strings.Index(p.buf, callClose)
	if i < 0 && !final && len(p.buf) < maxHeld {
		return Delta{}, false
	}
	body, rest, closed := p.buf, "", i >= 0
	if closed {
		body, rest = p.buf[:i], p.buf[i+len(callClose):]
	}
	p.buf, p.mode = rest, inText
	if c, ok := parseCall(body, p.calls); ok {
		p.calls++
		p.trim = true // the newline between calls is not content
		return Delta{Calls: []runnerapi.Call{c}}, true
	}
	raw := callOpen + body
	if closed {
		raw += callClose
	}
	return p.content(raw), true
}

func (p *Parser) json(final bool) (Delta, bool) {
	if !final && !strings.Contains(p.last, "}") && len(p.buf) < maxHeld {
		// An object ends only at a '}': no need to decode it all again.
		return Delta{}, false
	}
	dec := json.NewDecoder(strings.NewReader(p.buf))
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if errors.Is(err, io.ErrUnexpectedEOF) && !final && len(p.buf) < maxHeld {
		return Delta{}, false
	}
	if err == nil {
		if c, ok := parseCall(string(raw), p.calls); ok {
			p.calls++
			p.buf, p.mode = p.buf[dec.InputOffset():], inText
			return Delta{Calls: []runnerapi.Call{c}}, true
		}
	}
	// Not a call: the answer is content after all.
	p.mode = inText
	d := p.content(p.buf)
	p.buf = ""
	return d, false
}

// firstMarker is where in s the earliest of markers begins, and which it
// is (the first listed of those beginning there); -1 and "" if none is in s.
func firstMarker(s string, markers []string) (at int, which string) {
	at = -1
	for _, m := range markers {
		if i := strings.Index(s, m); i >= 0 && (at < 0 || i < at) {
			at, which = i, m
		}
	}
	return at, which
}

// heldPrefix is the length of the longest end of s that starts one of
// markers (and so must wait for more output).
func heldPrefix(s string, markers []string) int {
	keep := 0
	for _, m := range markers {
		for k := min(len(m)-1, len(s)); k > keep; k-- {
			if strings.HasSuffix(s, m[:k]) {
				keep = k
				break
			}
		}
	}
	return keep
}
