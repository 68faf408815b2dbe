package chatfmt

import (
	"regexp"
	"strings"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Harmony (gpt-oss) writes messages: a header (<|start|>assistant, then
// <|channel|>analysis, final or commentary, perhaps to=functions.name and
// <|constrain|>json) up to <|message|>, then a body up to <|end|>,
// <|call|> or <|return|>.

const (
	hMessage = "<|message|>"
	hChannel = "<|channel|>"
)

var (
	hEnds     = []string{"<|end|>", "<|call|>", "<|return|>", "<|start|>"}
	hMarkup   = regexp.MustCompile(`<\|[a-z_]+\|>|\bassistant\b`)
	recipient = regexp.MustCompile(`to=functions\.([A-Za-z0-9_\-]+)`)
)

type harmonyKind int

const (
	hContent harmonyKind = iota
	hReasoning
	hCall
)

type harmonyState struct {
	inBody bool
	header string
	kind   harmonyKind
	name   string
}

func (p *Parser) harmony(final bool) (Delta, bool) {
	h := &p.h
	if !h.inBody {
		i := strings.Index(p.buf, hMessage)
		if i < 0 {
			if !final {
				return Delta{}, false
			}
			// No message followed: what is not markup is content.
			d := p.content(strings.TrimSpace(hMarkup.ReplaceAllString(h.header+p.buf, "")))
			p.buf, h.header = "", ""
			return d, false
		}
		h.header += p.buf[:i]
		p.buf = p.buf[i+len(hMessage):]
		h.inBody, h.kind, h.name = true, hContent, ""
		channel := h.header
		if j := strings.LastIndex(channel, hChannel); j >= 0 {
			channel = channel[j+len(hChannel):]
		}
		switch m := recipient.FindStringSubmatch(h.header); {
		case m != nil && p.o.Tools:
			h.kind, h.name = hCall, m[1]
		case strings.HasPrefix(strings.TrimSpace(channel), "analysis"):
			h.kind = hReasoning
		}
		h.header = ""
		return Delta{}, true
	}
	at, end := firstMarker(p.buf, hEnds)
	body, rest := p.buf, ""
	switch {
	case at >= 0:
		body, rest = p.buf[:at], p.buf[at+len(end):]
		if end == "<|start|>" {
			rest = end + rest // the next message's header
		}
	case h.kind == hCall && !final && len(p.buf) < maxHeld:
		return Delta{}, false
	case !final:
		keep := heldPrefix(p.buf, hEnds)
		body, rest = p.buf[:len(p.buf)-keep], p.buf[len(p.buf)-keep:]
		p.buf = rest
		return p.harmonyBody(body), false
	}
	p.buf, h.inBody = rest, false
	return p.harmonyBody(body), at >= 0
}

// harmonyBody is a message body's text as what its channel makes it. A
// call's body is whole; one that does not parse is content.
func (p *Parser) harmonyBody(body string) Delta {
	switch p.h.kind {
	case hReasoning:
		return Delta{Reasoning: body}
	case hCall:
		b := `{"name": ` + quote(p.h.name) + `, "arguments": ` + body + `}`
		if c, ok := parseCall(b, p.calls); ok {
			p.calls++
			return Delta{Calls: []runnerapi.Call{c}}
		}
	}
	return p.content(body)
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
