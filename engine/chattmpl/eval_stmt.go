package chattmpl

import "fmt"

// Statement execution: text, output, if, for, set, macro and call blocks.

func (r *renderer) exec(nodes []node, s *scope) error {
	for _, n := range nodes {
		if err := r.execNode(n, s); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) execNode(n node, s *scope) error {
	switch n := n.(type) {
	case *textNode:
		return r.write(n.text)
	case *outputNode:
		v, err := r.eval(n.expr, s)
		if err != nil {
			return err
		}
		return r.write(pyStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, s)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.exec(n.bodies[i], s)
			}
		}
		if len(n.bodies) > len(n.conds) {
			return r.exec(n.bodies[len(n.conds)], s)
		}
		return nil
	case *forNode:
		return r.execFor(n, s)
	case *setNode:
		v, err := r.eval(n.value, s)
		if err != nil {
			return err
		}
		if n.attr != "" {
			obj, _ := s.lookup(n.targets[0])
			ns, ok := obj.(*namespace)
			if !ok {
				return fmt.Errorf("TemplateRuntimeError: cannot assign attribute on non-namespace object")
			}
			ns.d.Set(n.attr, v)
			return nil
		}
		return assign(s, n.targets, v)
	case *setBlockNode:
		v, err := r.captureFiltered(n.body, n.filters, s)
		if err != nil {
			return err
		}
		s.vars[n.name] = v
		return nil
	case *macroNode:
		s.vars[n.name] = &macro{def: n.m, scope: s, r: r}
		return nil
	case *callBlockNode:
		caller := &macro{def: n.m, scope: s, r: r}
		v, err := r.evalCall(n.call, s, caller)
		if err != nil {
			return err
		}
		return r.write(pyStr(v))
	case *filterBlockNode:
		v, err := r.captureFiltered(n.body, n.filters, s)
		if err != nil {
			return err
		}
		return r.write(pyStr(v))
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return fmt.Errorf("internal error: unknown node %T", n)
}

// captureFiltered renders body and passes the text through filters, as
// {% set x | f %} and {% filter f %} blocks do.
func (r *renderer) captureFiltered(body []node, filters []*filterExpr, s *scope) (any, error) {
	text, err := r.capture(body, s)
	if err != nil {
		return nil, err
	}
	var v any = text
	for _, f := range filters {
		if v, err = r.applyFilter(f, v, s); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func assign(s *scope, targets []string, v any) error {
	if len(targets) == 1 {
		s.vars[targets[0]] = v
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if _, ok := v.(*undefined); ok {
		return v.(*undefined).err()
	}
	if len(items) != len(targets) {
		return fmt.Errorf("ValueError: cannot unpack %d values into %d names", len(items), len(targets))
	}
	for i, t := range targets {
		s.vars[t] = items[i]
	}
	return nil
}

func (r *renderer) execFor(n *forNode, s *scope) error {
	iv, err := r.eval(n.iter, s)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return err
	}
	if n.cond != nil {
		var kept []any
		for _, it := range items {
			if err := r.step(); err != nil {
				return err
			}
			ls := newScope(s)
			if err := assign(ls, n.targets, it); err != nil {
				return err
			}
			c, err := r.eval(n.cond, ls)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	loop := &loopObj{items: items}
	for i, it := range items {
		if err := r.step(); err != nil {
			return err
		}
		loop.i = i
		ls := newScope(s)
		if err := assign(ls, n.targets, it); err != nil {
			return err
		}
		ls.vars["loop"] = loop
		err := r.exec(n.body, ls)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	if len(items) == 0 && n.elseBody != nil {
		return r.exec(n.elseBody, newScope(s))
	}
	return nil
}

type loopObj struct {
	items []any
	i     int
}

func (l *loopObj) attr(name string) any {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.i + 1)
	case "index0":
		return int64(l.i)
	case "revindex":
		return int64(n - l.i)
	case "revindex0":
		return int64(n - l.i - 1)
	case "first":
		return l.i == 0
	case "last":
		return l.i == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.i == 0 {
			return undef("there is no previous item")
		}
		return l.items[l.i-1]
	case "nextitem":
		if l.i >= n-1 {
			return undef("there is no next item")
		}
		return l.items[l.i+1]
	case "cycle":
		return &method{l, "cycle"}
	}
	return undef("'LoopContext' object has no attribute '%s'", name)
}
