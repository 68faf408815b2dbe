package chatfmt

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The formats whose markers are control tokens: Mistral's, DeepSeek's
// and Harmony's.

const (
	mistralCalls = "[TOOL_CALLS]"
	mistralArgs  = "[ARGS]"
	mistralID    = "[CALL_ID]"

	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// jsonValue reads the JSON value at the start of s (after space): its
// end, or incomplete (more output may finish it), or bad.
func jsonValue(s string) (raw string, end int, incomplete bool, err error) {
	dec := json.NewDecoder(strings.NewReader(s))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return "", 0, errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF), err
	}
	return string(v), int(dec.InputOffset()), false, nil
}

// giveUp writes the marker as content, as the model wrote it, and reads
// what was held after it again as text: it may hold the next marker.
// (Streaming gives up as soon as a call cannot parse and reads on as
// text; the whole output must come out the same.)
func (p *Parser) giveUp(marker string) (Delta, bool) {
	d := p.content(marker)
	p.mode = inText
	return d, true
}

// mistral reads what follows [TOOL_CALLS]: a JSON array of calls, or
// name[ARGS]{…} (with [CALL_ID]id before [ARGS] in some versions).
func (p *Parser) mistral(final bool) (Delta, bool) {
	t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
	if strings.HasPrefix(t, "[") {
		raw, end, incomplete, err := jsonValue(t)
		if err != nil {
			if incomplete && !final && len(p.buf) < maxHeld {
				return Delta{}, false
			}
			return p.giveUp(mistralCalls)
		}
		var items []json.RawMessage
		if json.Unmarshal([]byte(raw), &items) != nil || len(items) == 0 {
			return p.giveUp(mistralCalls) // an empty list calls nothing: it stays text
		}
		var d Delta
		for _, it := range items {
			c, ok := parseCall(string(it), p.calls)
			if !ok {
				return p.giveUp(mistralCalls)
			}
			p.calls++
			d.Calls = append(d.Calls, c)
		}
		p.buf, p.mode = t[end:], inText
		return d, true
	}
	i := strings.Index(t, mistralArgs)
	if i < 0 {
		if !final && len(p.buf) < maxHeld && !strings.ContainsAny(t, "{\n") {
			return Delta{}, false
		}
		return p.giveUp(mistralCalls)
	}
	name := t[:i]
	if strings.ContainsAny(name, "{\n") {
		// What streaming gives up on before [ARGS] arrives, the whole
		// text gives up on too: a name holds no brace or line break.
		return p.giveUp(mistralCalls)
	}
	if j := strings.Index(name, mistralID); j >= 0 {
		name = name[:j]
	}
	raw, end, incomplete, err := jsonValue(t[i+len(mistralArgs):])
	if err != nil {
		if incomplete && !final && len(p.buf) < maxHeld {
			return Delta{}, false
		}
		return p.giveUp(mistralCalls)
	}
	body, _ := json.Marshal(map[string]any{"name": strings.TrimSpace(name), "arguments": json.RawMessage(raw)})
	c, ok := parseCall(string(body), p.calls)
	if !ok {
		return p.giveUp(mistralCalls)
	}
	p.calls++
	p.buf, p.mode = t[i+len(mistralArgs)+end:], inText
	return Delta{Calls: []runnerapi.Call{c}}, true
}

// deepseek reads the calls between <｜tool▁calls▁begin｜> and its end.
func (p *Parser) deepseek(final bool) (Delta, bool) {
	t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
	switch {
	case strings.HasPrefix(t, dsCallsEnd):
		p.buf, p.mode, p.trim = t[len(dsCallsEnd):], inText, true
		return Delta{}, true
	case strings.HasPrefix(t, dsCallBegin):
		i := strings.Index(t, dsCallEnd)
		if i < 0 {
			if !final && len(p.buf) < maxHeld {
				return Delta{}, false
			}
			return p.giveUp(dsCallsBegin)
		}
		c, ok := deepseekCall(t[len(dsCallBegin):i], p.calls)
		if !ok {
			return p.giveUp(dsCallsBegin)
		}
		p.calls++
		p.buf = t[i+len(dsCallEnd):]
		return Delta{Calls: []runnerapi.Call{c}}, true
	case final && t == "" && p.calls > p.since:
		p.mode = inText // the calls ended with the output
		return Delta{}, false
	case !final && (t == "" || strings.HasPrefix(dsCallBegin, t) || strings.HasPrefix(dsCallsEnd, t)):
		return Delta{}, false
	}
	return p.giveUp(dsCallsBegin)
}

// deepseekCall reads "function<｜tool▁sep｜>name\n```json\n{…}\n```" (V3,
// R1) or "name<｜tool▁sep｜>{…}" (V3.1).
func deepseekCall(body string, index int) (runnerapi.Call, bool) {
	kind, rest, ok := strings.Cut(body, dsSep)
	if !ok {
		return runnerapi.Call{}, false
	}
	name, args := strings.TrimSpace(kind), rest
	if name == "function" {
		n, a, _ := strings.Cut(rest, "\n")
		name, args = strings.TrimSpace(n), a
		args = strings.TrimSpace(args)
		args = strings.TrimPrefix(args, "```json")
		args = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(args, "```")), "```")
	}
	b, _ := json.Marshal(map[string]any{"name": name, "arguments": json.RawMessage(strings.TrimSpace(args))})
	return parseCall(string(b), index)
}
