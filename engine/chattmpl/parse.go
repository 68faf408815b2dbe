package chattmpl

import (
	"fmt"
	"slices"
)

// SyntaxError is a template the engine cannot compile: bad syntax, or a
// construct it does not support (named in Construct).
type SyntaxError struct {
	Line      int
	Construct string // e.g. "{% include %}", "filter 'from_json'"; "" for plain syntax errors
	Msg       string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

type parser struct {
	toks []token
	pos  int
	soft bool // inside an if (jinja2 defers unknown filters/tests to render time there)
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) next() token { t := p.toks[p.pos]; p.advance(); return t }
func (p *parser) advance() {
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
}

func (p *parser) fail(format string, args ...any) error {
	return &SyntaxError{Line: p.cur().line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) unsupported(construct string) error {
	return &SyntaxError{Line: p.cur().line, Construct: construct, Msg: "unsupported construct " + construct}
}

func (p *parser) isOp(op string) bool  { t := p.cur(); return t.kind == tkOp && t.val == op }
func (p *parser) isName(n string) bool { t := p.cur(); return t.kind == tkName && t.val == n }
func (p *parser) skipOp(op string) bool {
	ok := p.isOp(op)
	if ok {
		p.advance()
	}
	return ok
}
func (p *parser) skipName(n string) bool {
	ok := p.isName(n)
	if ok {
		p.advance()
	}
	return ok
}

// parseSeq parses comma-separated items (a trailing comma allowed) up to
// and including close; the opening bracket is already consumed.
func (p *parser) parseSeq(close string, item func() error) error {
	for n := 0; !p.isOp(close); n++ {
		if n > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.isOp(close) {
				break
			}
		}
		if err := item(); err != nil {
			return err
		}
	}
	p.advance()
	return nil
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.fail("expected %q, got %s", op, p.cur())
	}
	return nil
}

func (p *parser) expectKind(k tokKind) (token, error) {
	if p.cur().kind != k {
		return token{}, p.fail("expected %s, got %s", k, p.cur())
	}
	return p.next(), nil
}

func (p *parser) expectName() (string, error) {
	t, err := p.expectKind(tkName)
	return t.val, err
}

// parseBody parses nodes until a {% tag %} named in ends, and returns the
// tag found (after its name; the caller reads the rest of the tag).
func (p *parser) parseBody(ends ...string) ([]node, string, error) {
	var out []node
	for {
		t := p.cur()
		switch t.kind {
		case tkText:
			p.advance()
			out = append(out, &textNode{t.val})
		case tkVarBegin:
			p.advance()
			e, err := p.parseTuple(true)
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tkVarEnd); err != nil {
				return nil, "", err
			}
			out = append(out, &outputNode{e})
		case tkBlockBegin:
			p.advance()
			name := p.cur()
			if name.kind != tkName {
				return nil, "", p.fail("expected a tag name, got %s", name)
			}
			if slices.Contains(ends, name.val) {
				p.advance()
				return out, name.val, nil
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				out = append(out, n...)
			}
		case tkEOF:
			if len(ends) > 0 {
				return nil, "", p.fail("unexpected end of template, expected %q", ends[0])
			}
			return out, "", nil
		default:
			return nil, "", p.fail("unexpected %s", t)
		}
	}
}

func (p *parser) endTag() error {
	if _, err := p.expectKind(tkBlockEnd); err != nil {
		return err
	}
	return nil
}

// withSoft parses with p.soft set to soft, then restores it.
func withSoft[T any](p *parser, soft bool, f func() (T, string, error)) (T, string, error) {
	old := p.soft
	p.soft = soft
	defer func() { p.soft = old }()
	return f()
}

func (p *parser) parseStatement() ([]node, error) {
	tag := p.next()
	switch tag.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(tag.line)
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "filter":
		fs, err := p.parseFilterChain()
		if err != nil {
			return nil, err
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endfilter")
		if err != nil {
			return nil, err
		}
		return []node{&filterBlockNode{fs, body}}, p.endTag()
	case "break", "continue":
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if tag.val == "break" {
			return []node{&breakNode{}}, nil
		}
		return []node{&continueNode{}}, nil
	case "generation": // transformers' {% generation %}: renders its body
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endgeneration")
		if err != nil {
			return nil, err
		}
		return body, p.endTag()
	case "include", "import", "from", "extends", "block", "with", "autoescape", "do", "trans", "raw":
		p.pos--
		return nil, p.unsupported("{% " + tag.val + " %}")
	}
	p.pos--
	return nil, p.unsupported("{% " + tag.val + " %}")
}
