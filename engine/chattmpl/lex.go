package chattmpl

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

type tokKind int

const (
	tkText tokKind = iota
	tkVarBegin
	tkVarEnd
	tkBlockBegin
	tkBlockEnd
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
	tkEOF
)

func (k tokKind) String() string {
	return [...]string{"text", "'{{'", "'}}'", "'{%'", "'%}'", "name", "string", "integer", "float", "operator", "end of template"}[k]
}

type token struct {
	kind tokKind
	val  string // text, name, operator, unescaped string, number literal
	line int
}

func (t token) String() string {
	switch t.kind {
	case tkName, tkOp, tkInt, tkFloat:
		return fmt.Sprintf("%q", t.val)
	case tkString:
		return "string"
	}
	return t.kind.String()
}

// pySpace reports whether r is whitespace to Python's str.isspace and \s.
func pySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

func pyRStrip(s string) string { return strings.TrimRightFunc(s, pySpace) }

// normalizeNewlines does what jinja2's lexer does to a source: split it as
// str.splitlines does and join the lines with "\n", which also drops one
// trailing newline (keep_trailing_newline is off).
func normalizeNewlines(s string) string {
	lines := pySplitLines(s, false)
	return strings.Join(lines, "\n")
}

// pySplitLines is Python's str.splitlines.
func pySplitLines(s string, keepends bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		brk := 0
		switch r {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			brk = n
		case '\r':
			brk = 1
			if i+1 < len(s) && s[i+1] == '\n' {
				brk = 2
			}
		}
		if brk == 0 {
			i += n
			continue
		}
		if keepends {
			out = append(out, s[start:i+brk])
		} else {
			out = append(out, s[start:i])
		}
		i += brk
		start = i
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// lex splits a template into tokens the way jinja2's lexer does with
// trim_blocks and lstrip_blocks on.
func lex(src string) ([]token, error) {
	src = normalizeNewlines(src)
	var toks []token
	line := 1
	pos := 0
	lineStarting := true
	for pos < len(src) {
		idx, opener := nextOpener(src, pos)
		if idx < 0 {
			toks = append(toks, token{tkText, src[pos:], line})
			break
		}
		text := src[pos:idx]
		sign := byte(0)
		if idx+2 < len(src) && (src[idx+2] == '-' || src[idx+2] == '+') {
			sign = src[idx+2]
		}
		// {% raw %}: find its end now.
		if opener == "{%" {
			if body, end, ok := rawBlock(src, idx); ok {
				text = stripBefore(text, sign, true, lineStarting)
				if text != "" {
					toks = append(toks, token{tkText, text, line})
				}
				line += strings.Count(src[pos:idx], "\n")
				if body != "" {
					toks = append(toks, token{tkText, body, line})
				}
				line += strings.Count(src[idx:end], "\n")
				lineStarting = strings.HasSuffix(src[:end], "\n")
				pos = end
				continue
			}
		}
		text = stripBefore(text, sign, opener != "{{", lineStarting)
		if text != "" {
			toks = append(toks, token{tkText, text, line})
		}
		line += strings.Count(src[pos:idx], "\n")
		pos = idx + 2
		if sign != 0 {
			pos++
		}
		switch opener {
		case "{#":
			end := strings.Index(src[pos:], "#}")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unclosed comment", line)
			}
			end += pos
			body := src[pos:end]
			line += strings.Count(body, "\n")
			pos = end + 2
			switch {
			case strings.HasSuffix(body, "-"):
				pos = skipSpace(src, pos, &line)
			case strings.HasSuffix(body, "+"):
			default:
				if pos < len(src) && src[pos] == '\n' {
					pos++
					line++
				}
			}
			lineStarting = strings.HasSuffix(src[:pos], "\n")
		case "{{", "{%":
			begin, endTok := tkVarBegin, tkVarEnd
			if opener == "{%" {
				begin, endTok = tkBlockBegin, tkBlockEnd
			}
			toks = append(toks, token{begin, opener, line})
			var err error
			toks, pos, err = lexTag(src, pos, &line, opener == "{%", toks)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{endTok, "", line})
			lineStarting = strings.HasSuffix(src[:pos], "\n")
		}
	}
	toks = append(toks, token{tkEOF, "", line})
	return toks, nil
}

func nextOpener(src string, pos int) (int, string) {
	for i := pos; i+1 < len(src); i++ {
		if src[i] != '{' {
			continue
		}
		switch src[i+1] {
		case '{', '%', '#':
			return i, src[i : i+2]
		}
	}
	return -1, ""
}

// stripBefore applies "{%-" and lstrip_blocks to the text before a tag.
func stripBefore(text string, sign byte, block, lineStarting bool) string {
	if sign == '-' {
		return pyRStrip(text)
	}
	if sign == '+' || !block {
		return text
	}
	l := strings.LastIndexByte(text, '\n') + 1
	if l > 0 || lineStarting {
		if strings.TrimLeftFunc(text[l:], pySpace) == "" {
			return text[:l]
		}
	}
	return text
}

func skipSpace(src string, pos int, line *int) int {
	for pos < len(src) {
		r, n := utf8.DecodeRuneInString(src[pos:])
		if !pySpace(r) {
			break
		}
		if r == '\n' {
			*line++
		}
		pos += n
	}
	return pos
}

// rawBlock recognizes "{% raw %}...{% endraw %}" at idx and returns its body
// and the position after it.
func rawBlock(src string, idx int) (body string, end int, ok bool) {
	p := idx + 2
	if p < len(src) && (src[p] == '-' || src[p] == '+') {
		p++
	}
	q := strings.TrimLeft(src[p:], " \t\n\r")
	if !strings.HasPrefix(q, "raw") {
		return "", 0, false
	}
	q = strings.TrimLeft(q[3:], " \t\n\r")
	p = len(src) - len(q)
	switch {
	case strings.HasPrefix(q, "-%}"):
		p = skipSpace(src, p+3, new(int))
	case strings.HasPrefix(q, "%}"):
		p += 2
		if p < len(src) && src[p] == '\n' {
			p++
		}
	default:
		return "", 0, false
	}
	for i := p; ; {
		j, op := nextOpener(src, i)
		if j < 0 {
			return "", 0, false
		}
		if op != "{%" {
			i = j + 1
			continue
		}
		k := j + 2
		sign := byte(0)
		if k < len(src) && (src[k] == '-' || src[k] == '+') {
			sign = src[k]
			k++
		}
		r := strings.TrimLeft(src[k:], " \t\n\r")
		if !strings.HasPrefix(r, "endraw") {
			i = j + 1
			continue
		}
		r = strings.TrimLeft(r[6:], " \t\n\r")
		e := len(src) - len(r)
		switch {
		case strings.HasPrefix(r, "-%}"):
			e = skipSpace(src, e+3, new(int))
		case strings.HasPrefix(r, "%}"):
			e += 2
			if e < len(src) && src[e] == '\n' {
				e++
			}
		default:
			i = j + 1
			continue
		}
		b := src[p:j]
		if sign == '-' {
			b = pyRStrip(b)
		}
		return b, e, true
	}
}

var ops3 = []string{"//", "**", "==", "!=", "<=", ">="}

// lexTag lexes the inside of a {{ }} or {% %} tag starting at pos, up to
// and including its end marker.
func lexTag(src string, pos int, line *int, block bool, toks []token) ([]token, int, error) {
	depth := 0
	for {
		pos = skipSpace(src, pos, line)
		if pos >= len(src) {
			return nil, 0, fmt.Errorf("line %d: unclosed tag", *line)
		}
		rest := src[pos:]
		if depth == 0 {
			end := "}}"
			if block {
				end = "%}"
			}
			switch {
			case strings.HasPrefix(rest, "-"+end):
				return toks, skipSpace(src, pos+3, line), nil
			case strings.HasPrefix(rest, "+"+end) && block:
				return toks, pos + 3, nil
			case strings.HasPrefix(rest, end):
				pos += 2
				if block && pos < len(src) && src[pos] == '\n' {
					pos++
					*line++
				}
				return toks, pos, nil
			}
		}
		c := rest[0]
		switch {
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			n := 1
			for n < len(rest) && (rest[n] == '_' || rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= 'A' && rest[n] <= 'Z' || rest[n] >= '0' && rest[n] <= '9') {
				n++
			}
			toks = append(toks, token{tkName, rest[:n], *line})
			pos += n
		case c >= '0' && c <= '9':
			kind, n := lexNumber(rest)
			if last := toks[len(toks)-1]; last.kind == tkOp && last.val == "." {
				// After a dot only an integer (jinja2: "(?<!\.)" floats).
				kind, n = tkInt, 0
				for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
					n++
				}
			}
			toks = append(toks, token{kind, strings.ReplaceAll(rest[:n], "_", ""), *line})
			pos += n
		case c == '\'' || c == '"':
			s, n, err := lexString(rest)
			if err != nil {
				return nil, 0, fmt.Errorf("line %d: %w", *line, err)
			}
			toks = append(toks, token{tkString, s, *line})
			*line += strings.Count(rest[:n], "\n")
			pos += n
		default:
			op := ""
			for _, o := range ops3 {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("+-*/%~<>=()[]{},.:|;", rune(c)) {
					r, _ := utf8.DecodeRuneInString(rest)
					return nil, 0, fmt.Errorf("line %d: unexpected character %q", *line, r)
				}
				op = rest[:1]
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return nil, 0, fmt.Errorf("line %d: unexpected %q", *line, op)
				}
				depth--
			}
			toks = append(toks, token{tkOp, op, *line})
			pos += len(op)
		}
	}
}

func lexNumber(s string) (tokKind, int) {
	digits := func(i int) int {
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9') {
			i++
		}
		return i
	}
	n := digits(0)
	kind := tkInt
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		n = digits(n + 1)
		kind = tkFloat
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && s[m] >= '0' && s[m] <= '9' {
			n = digits(m)
			kind = tkFloat
		}
	}
	return kind, n
}

// lexString reads a quoted literal and unescapes it as Python's
// unicode-escape codec does (jinja2's rule).
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c == '\\' && i+1 < len(s):
			e := s[i+1]
			i += 2
			switch e {
			case '\n':
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'v':
				b.WriteByte('\v')
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+n > len(s) {
					return "", 0, fmt.Errorf("truncated \\%c escape", e)
				}
				var r rune
				for _, h := range s[i : i+n] {
					d := hexVal(h)
					if d < 0 {
						return "", 0, fmt.Errorf("truncated \\%c escape", e)
					}
					r = r*16 + rune(d)
				}
				if r > utf8.MaxRune {
					return "", 0, fmt.Errorf("illegal Unicode character")
				}
				b.WriteRune(r)
				i += n
			case '0', '1', '2', '3', '4', '5', '6', '7':
				r := rune(e - '0')
				for k := 0; k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
					r = r*8 + rune(s[i]-'0')
					i++
				}
				b.WriteRune(r)
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", 0, fmt.Errorf("unterminated string")
}

func hexVal(r rune) int {
	switch {
	case r >= '0' && r <= '9':
		return int(r - '0')
	case r >= 'a' && r <= 'f':
		return int(r-'a') + 10
	case r >= 'A' && r <= 'F':
		return int(r-'A') + 10
	}
	return -1
}
