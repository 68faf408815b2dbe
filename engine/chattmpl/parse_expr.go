package chattmpl

import (
	"fmt"
	"strconv"
)

// Expressions, by precedence: conditional, or, and, not, comparison, + -,
// ~, * / // %, **, unary, then primaries with their attribute, item, call,
// filter and test suffixes.

// parseTuple parses an expression or a bare comma-separated tuple.
func (p *parser) parseTuple(condexpr bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			isTuple = true
			if t := p.cur(); t.kind == tkBlockEnd || t.kind == tkVarEnd || p.isOp(")") || p.isOp("=") {
				break
			}
		}
		e, err := p.parseExpr(condexpr)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !isTuple {
		return items[0], nil
	}
	return &tupleExpr{items}, nil
}

func (p *parser) parseExpr(condexpr bool) (expr, error) {
	if !condexpr {
		return p.parseOr()
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		// jinja2 checks filters in a conditional expression at render time.
		old := p.soft
		p.soft = true
		p.advance()
		c, err := p.parseOr()
		if err != nil {
			p.soft = old
			return nil, err
		}
		var no expr
		if p.skipName("else") {
			if no, err = p.parseExpr(true); err != nil {
				p.soft = old
				return nil, err
			}
		}
		p.soft = old
		e = &condExpr{cond: c, yes: e, no: no}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.skipName("or") {
		var r expr
		r, err = p.parseAnd()
		l = &binExpr{"or", l, r}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.skipName("and") {
		var r expr
		r, err = p.parseNot()
		l = &binExpr{"and", l, r}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		x, err := p.parseNot()
		return &unaryExpr{"not", x}, err
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	l, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tkOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.advance()
		case p.isName("in"):
			op = "in"
			p.advance()
		case p.isName("not") && p.toks[p.pos+1].kind == tkName && p.toks[p.pos+1].val == "in":
			op = "not in"
			p.pos += 2
		default:
			return l, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op, l, r}
	}
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		op := p.next().val
		var r expr
		r, err = p.parseConcat()
		l = &binExpr{op, l, r}
	}
	return l, err
}

func (p *parser) parseConcat() (expr, error) {
	l, err := p.parseMath2()
	for err == nil && p.isOp("~") {
		p.advance()
		var r expr
		r, err = p.parseMath2()
		l = &binExpr{"~", l, r}
	}
	return l, err
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		op := p.next().val
		var r expr
		r, err = p.parsePow()
		l = &binExpr{op, l, r}
	}
	return l, err
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	for err == nil && p.isOp("**") {
		p.advance()
		var r expr
		r, err = p.parseUnary(true)
		l = &binExpr{"**", l, r}
	}
	return l, err
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var e expr
	var err error
	switch {
	case p.isOp("-"), p.isOp("+"):
		op := p.next().val
		var x expr
		if x, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		e = &unaryExpr{op, x}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tkName:
		p.advance()
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{t.val, t.line}, nil
	case tkString:
		p.advance()
		s := t.val
		for p.cur().kind == tkString {
			s += p.next().val
		}
		return &constExpr{s}, nil
	case tkInt:
		p.advance()
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, &SyntaxError{Line: t.line, Construct: "integer literal", Msg: "unsupported construct integer literal " + t.val + " (beyond 64 bits)"}
		}
		return &constExpr{n}, nil
	case tkFloat:
		p.advance()
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, p.fail("bad float %s", t.val)
		}
		return &constExpr{f}, nil
	case tkOp:
		switch t.val {
		case "(":
			p.advance()
			if p.skipOp(")") {
				return &tupleExpr{}, nil
			}
			e, err := p.parseTuple(true)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.advance()
			l := &listExpr{}
			err := p.parseSeq("]", func() error {
				e, err := p.parseExpr(true)
				if err != nil {
					return err
				}
				l.items = append(l.items, e)
				return nil
			})
			return l, err
		case "{":
			p.advance()
			d := &dictExpr{}
			err := p.parseSeq("}", func() error {
				k, err := p.parseExpr(true)
				if err != nil {
					return err
				}
				if err := p.expectOp(":"); err != nil {
					return err
				}
				v, err := p.parseExpr(true)
				if err != nil {
					return err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
				return nil
			})
			return d, err
		}
	}
	return nil, p.fail("unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.advance()
			t := p.next()
			switch t.kind {
			case tkName:
				e = &attrExpr{e, t.val}
			case tkInt:
				n, _ := strconv.ParseInt(t.val, 10, 64)
				e = &itemExpr{e, &constExpr{n}}
			default:
				return nil, p.fail("expected an attribute name, got %s", t)
			}
		case p.isOp("["):
			p.advance()
			s, err := p.parseSubscript(e)
			if err != nil {
				return nil, err
			}
			e = s
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr) (expr, error) {
	var parts [3]expr
	idx := 0
	isSlice := false
	for !p.isOp("]") {
		if p.skipOp(":") {
			isSlice = true
			idx++
			if idx > 2 {
				return nil, p.fail("too many ':' in a slice")
			}
			continue
		}
		if parts[idx] != nil {
			if p.isOp(",") {
				return nil, p.unsupported("tuple subscript")
			}
			return nil, p.fail("unexpected %s in subscript", p.cur())
		}
		e, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		parts[idx] = e
	}
	p.advance()
	if !isSlice {
		if parts[0] == nil {
			return nil, p.fail("empty subscript")
		}
		return &itemExpr{obj, parts[0]}, nil
	}
	return &sliceExpr{obj, parts[0], parts[1], parts[2]}, nil
}

func (p *parser) parseArgs() ([]expr, []kwarg, error) {
	var args []expr
	var kws []kwarg
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	err := p.parseSeq(")", func() error {
		if p.isOp("*") || p.isOp("**") {
			return p.unsupported("*args/**kwargs in a call")
		}
		if p.cur().kind == tkName && p.toks[p.pos+1].kind == tkOp && p.toks[p.pos+1].val == "=" {
			name := p.next().val
			p.advance()
			v, err := p.parseExpr(true)
			if err != nil {
				return err
			}
			kws = append(kws, kwarg{name, v})
			return nil
		}
		if len(kws) > 0 {
			return p.fail("positional argument follows keyword argument")
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return err
		}
		args = append(args, v)
		return nil
	})
	return args, kws, err
}

func (p *parser) parseCall(fn expr) (expr, error) {
	args, kws, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn, args, kws}, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.advance()
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			p.advance()
			t, err := p.parseTest(e)
			if err != nil {
				return nil, err
			}
			e = t
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) dottedName() (string, int, error) {
	t, err := p.expectKind(tkName)
	if err != nil {
		return "", 0, err
	}
	name := t.val
	for p.isOp(".") {
		p.advance()
		n, err := p.expectName()
		if err != nil {
			return "", 0, err
		}
		name += "." + n
	}
	return name, t.line, nil
}

func (p *parser) parseFilter(x expr) (*filterExpr, error) {
	name, line, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	f := &filterExpr{x: x, name: name, line: line}
	if _, ok := filters[name]; !ok && !p.soft {
		return nil, &SyntaxError{Line: line, Construct: "filter '" + name + "'", Msg: fmt.Sprintf("unsupported construct filter '%s' (no such filter)", name)}
	}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	negate := p.skipName("not")
	name, line, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	t := &testExpr{x: x, name: name, negate: negate, line: line}
	if _, ok := tests[name]; !ok && !p.soft {
		return nil, &SyntaxError{Line: line, Construct: "test '" + name + "'", Msg: fmt.Sprintf("unsupported construct test '%s' (no such test)", name)}
	}
	c := p.cur()
	switch {
	case p.isOp("("):
		if t.args, _, err = p.parseArgs(); err != nil {
			return nil, err
		}
	case (c.kind == tkName || c.kind == tkString || c.kind == tkInt || c.kind == tkFloat || p.isOp("[") || p.isOp("{")) &&
		!p.isName("else") && !p.isName("or") && !p.isName("and"):
		if p.isName("is") {
			return nil, p.fail("cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		t.args = []expr{a}
	}
	return t, nil
}
