package chattmpl

// Statement tags: if, for, set, macro, call and filter blocks.

func (p *parser) parseIf() ([]node, error) {
	n := &ifNode{}
	for {
		c, _, err := withSoft(p, true, func() (expr, string, error) { e, err := p.parseTuple(false); return e, "", err })
		if err != nil {
			return nil, err
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, end, err := withSoft(p, true, func() ([]node, string, error) { return p.parseBody("elif", "else", "endif") })
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, c)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endTag(); err != nil {
				return nil, err
			}
			body, _, err := withSoft(p, true, func() ([]node, string, error) { return p.parseBody("endif") })
			if err != nil {
				return nil, err
			}
			n.bodies = append(n.bodies, body)
		}
		return []node{n}, p.endTag()
	}
}

// parseTargets reads "a" or "a, b" or "(a, b)".
func (p *parser) parseTargets() ([]string, error) {
	paren := p.skipOp("(")
	var names []string
	for {
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		names = append(names, n)
		if !p.skipOp(",") {
			break
		}
		if p.cur().kind != tkName {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func (p *parser) parseFor(line int) ([]node, error) {
	n := &forNode{line: line}
	var err error
	if n.targets, err = p.parseTargets(); err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.fail("expected 'in' in for loop, got %s", p.cur())
	}
	old := p.soft
	p.soft = false
	defer func() { p.soft = old }()
	if n.iter, err = p.parseTuple(false); err != nil {
		return nil, err
	}
	if p.skipName("if") {
		if n.cond, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.unsupported("recursive for loop")
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody("else", "endfor")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if n.elseBody, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return []node{n}, p.endTag()
}

func (p *parser) parseSet() ([]node, error) {
	first, err := p.expectName()
	if err != nil {
		return nil, err
	}
	if p.skipOp(".") {
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseTuple(true)
		if err != nil {
			return nil, err
		}
		return []node{&setNode{targets: []string{first}, attr: attr, value: v}}, p.endTag()
	}
	targets := []string{first}
	for p.skipOp(",") {
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		targets = append(targets, n)
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(true)
		if err != nil {
			return nil, err
		}
		return []node{&setNode{targets: targets, value: v}}, p.endTag()
	}
	if len(targets) > 1 {
		return nil, p.fail("expected '=' after set targets")
	}
	var fs []*filterExpr
	if p.isOp("|") {
		if fs, err = p.parseFilterChain(); err != nil {
			return nil, err
		}
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	body, _, err := p.parseBody("endset")
	if err != nil {
		return nil, err
	}
	return []node{&setBlockNode{name: first, filters: fs, body: body}}, p.endTag()
}

// parseFilterChain reads "f1(args) | f2 ..." (the leading | optional).
func (p *parser) parseFilterChain() ([]*filterExpr, error) {
	var fs []*filterExpr
	p.skipOp("|")
	for {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
		if !p.skipOp("|") {
			return fs, nil
		}
	}
}

func (p *parser) parseParams() ([]string, []expr, error) {
	var params []string
	var defaults []expr
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	err := p.parseSeq(")", func() error {
		n, err := p.expectName()
		if err != nil {
			return err
		}
		var d expr
		if p.skipOp("=") {
			if d, err = p.parseExpr(true); err != nil {
				return err
			}
		} else if len(defaults) > 0 && defaults[len(defaults)-1] != nil {
			return p.fail("non-default argument follows default argument")
		}
		params = append(params, n)
		defaults = append(defaults, d)
		return nil
	})
	return params, defaults, err
}

func (p *parser) parseMacro() ([]node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	params, defaults, err := p.parseParams()
	if err != nil {
		return nil, err
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	body, _, err := withSoft(p, false, func() ([]node, string, error) { return p.parseBody("endmacro") })
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tkName {
		p.advance() // {% endmacro name %}
	}
	m := &macroDef{name: name, params: params, defaults: defaults, body: body}
	return []node{&macroNode{name, m}}, p.endTag()
}

func (p *parser) parseCallBlock() ([]node, error) {
	var params []string
	var defaults []expr
	var err error
	if p.isOp("(") {
		if params, defaults, err = p.parseParams(); err != nil {
			return nil, err
		}
	}
	e, err := p.parseExpr(true)
	if err != nil {
		return nil, err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return nil, p.fail("expected a call in %s", "{% call %}")
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	body, _, err := withSoft(p, false, func() ([]node, string, error) { return p.parseBody("endcall") })
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: "caller", params: params, defaults: defaults, body: body}
	return []node{&callBlockNode{call, m}}, p.endTag()
}
