package chattmpl

import "fmt"

// Expression evaluation: literals, names, attribute and item access, slices,
// operators, filters, tests and calls.

func (r *renderer) eval(e expr, s *scope) (any, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := s.lookup(e.name); ok {
			return v, nil
		}
		return undef("'%s' is undefined", e.name), nil
	case *listExpr:
		out, err := r.evalList(e.items, s)
		if err != nil {
			return nil, err
		}
		return out, nil
	case *tupleExpr:
		out, err := r.evalList(e.items, s)
		if err != nil {
			return nil, err
		}
		return tuple(out), nil
	case *dictExpr:
		return r.evalDict(e, s)
	case *attrExpr:
		obj, err := r.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, e.name)
	case *itemExpr:
		obj, err := r.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		k, err := r.eval(e.key, s)
		if err != nil {
			return nil, err
		}
		return getItem(obj, k)
	case *sliceExpr:
		return r.evalSlice(e, s)
	case *unaryExpr:
		v, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		return unaryOp(e.op, v)
	case *binExpr:
		return r.evalBin(e, s)
	case *condExpr:
		c, err := r.eval(e.cond, s)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.yes, s)
		}
		if e.no == nil {
			return undef("the inline if-expression evaluated to false and no else section was defined"), nil
		}
		return r.eval(e.no, s)
	case *callExpr:
		return r.evalCall(e, s, nil)
	case *filterExpr:
		v, err := r.eval(e.x, s)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, v, s)
	case *testExpr:
		return r.evalTest(e, s)
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", e)
}

// evalDict builds a dict literal; keys must be hashable, as in Python.
func (r *renderer) evalDict(e *dictExpr, s *scope) (any, error) {
	d := NewDict()
	for i := range e.keys {
		k, err := r.eval(e.keys[i], s)
		if err != nil {
			return nil, err
		}
		if !hashable(k) {
			return nil, fmt.Errorf("TypeError: unhashable type: '%s'", typeName(k))
		}
		v, err := r.eval(e.vals[i], s)
		if err != nil {
			return nil, err
		}
		d.Set(k, v)
	}
	return d, nil
}

// evalTest is "x is name(args)" and "x is not name(args)".
func (r *renderer) evalTest(e *testExpr, s *scope) (any, error) {
	v, err := r.eval(e.x, s)
	if err != nil {
		return nil, err
	}
	t, ok := tests[e.name]
	if !ok {
		return nil, fmt.Errorf("TemplateRuntimeError: no test named '%s'", e.name)
	}
	args, err := r.evalList(e.args, s)
	if err != nil {
		return nil, err
	}
	b, err := t(r, plain(v), args)
	if err != nil {
		return nil, err
	}
	return b != e.negate, nil
}

func (r *renderer) evalList(es []expr, s *scope) ([]any, error) {
	out := make([]any, len(es))
	for i, x := range es {
		v, err := r.eval(x, s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *renderer) evalKwargs(kws []kwarg, s *scope) (*Dict, error) {
	d := NewDict()
	for _, k := range kws {
		v, err := r.eval(k.v, s)
		if err != nil {
			return nil, err
		}
		d.Set(k.name, v)
	}
	return d, nil
}

func (r *renderer) applyFilter(f *filterExpr, v any, s *scope) (any, error) {
	fn, ok := filters[f.name]
	if !ok {
		return nil, fmt.Errorf("TemplateRuntimeError: no filter named '%s'", f.name)
	}
	args, err := r.evalList(f.args, s)
	if err != nil {
		return nil, err
	}
	kw, err := r.evalKwargs(f.kwargs, s)
	if err != nil {
		return nil, err
	}
	_, isMarkup := v.(markup)
	if f.name == "safe" || f.name == "e" || f.name == "escape" {
		return fn(r, v, args, kw)
	}
	res, err := r.built(fn(r, plain(v), args, kw))
	if s, ok := res.(string); ok && isMarkup && markupFilters[f.name] {
		return markup(s), err
	}
	return res, err
}

func (r *renderer) evalSlice(e *sliceExpr, s *scope) (any, error) {
	obj, err := r.eval(e.obj, s)
	if err != nil {
		return nil, err
	}
	var idx [3]*int64
	for i, x := range []expr{e.start, e.stop, e.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x, s)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := asInt(v)
		if !ok {
			if u, ok := v.(*undefined); ok {
				return nil, u.err()
			}
			return nil, fmt.Errorf("TypeError: slice indices must be integers or None")
		}
		idx[i] = &n
	}
	var seq []any
	var runes []rune
	isStr := false
	switch x := obj.(type) {
	case *undefined:
		return nil, x.err()
	case []any:
		seq = x
	case tuple:
		seq = x
	case string:
		runes = []rune(x)
		isStr = true
	default:
		return undef("'%s' object is not subscriptable", typeName(obj)), nil
	}
	n := int64(len(seq))
	if isStr {
		n = int64(len(runes))
	}
	positions, err := sliceIndices(n, idx)
	if err != nil {
		return nil, err
	}
	if isStr {
		out := make([]rune, len(positions))
		for i, p := range positions {
			out[i] = runes[p]
		}
		return string(out), nil
	}
	out := make([]any, len(positions))
	for i, p := range positions {
		out[i] = seq[p]
	}
	if _, ok := obj.(tuple); ok {
		return tuple(out), nil
	}
	return out, nil
}

// sliceIndices is Python's slice.indices, expanded.
func sliceIndices(n int64, idx [3]*int64) ([]int64, error) {
	step := int64(1)
	if idx[2] != nil {
		step = *idx[2]
		if step == 0 {
			return nil, fmt.Errorf("ValueError: slice step cannot be zero")
		}
	}
	clamp := func(p *int64, def, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += n
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	var start, stop int64
	if step > 0 {
		start = clamp(idx[0], 0, 0, n)
		stop = clamp(idx[1], n, 0, n)
	} else {
		start = clamp(idx[0], n-1, -1, n-1)
		stop = clamp(idx[1], -1, -1, n-1)
	}
	var out []int64
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, i)
	}
	return out, nil
}

func (r *renderer) evalBin(e *binExpr, s *scope) (any, error) {
	l, err := r.eval(e.l, s)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return r.eval(e.r, s)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return r.eval(e.r, s)
	}
	rv, err := r.eval(e.r, s)
	if err != nil {
		return nil, err
	}
	return r.built(binOp(e.op, l, rv))
}

func (r *renderer) evalCall(e *callExpr, s *scope, caller *macro) (any, error) {
	fn, err := r.eval(e.fn, s)
	if err != nil {
		return nil, err
	}
	args, err := r.evalList(e.args, s)
	if err != nil {
		return nil, err
	}
	kw, err := r.evalKwargs(e.kwargs, s)
	if err != nil {
		return nil, err
	}
	if caller != nil {
		kw.Set("caller", caller)
	}
	return r.built(r.call(fn, args, kw))
}

func (r *renderer) call(fn any, args []any, kw *Dict) (any, error) {
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, args, kw)
	case Func:
		return f(args, kw)
	case *method:
		return r.callMethod(f, args, kw)
	case *undefined:
		return nil, f.err()
	}
	return nil, fmt.Errorf("TypeError: '%s' object is not callable", typeName(fn))
}

func (r *renderer) callMacro(m *macro, args []any, kw *Dict) (any, error) {
	d := m.def
	if len(args) > len(d.params) {
		return nil, fmt.Errorf("TypeError: macro '%s' takes not more than %d argument(s)", d.name, len(d.params))
	}
	if r.depth >= maxCallDepth {
		return nil, fmt.Errorf("RecursionError: macro calls nested deeper than %d", maxCallDepth)
	}
	if err := r.step(); err != nil {
		return nil, err
	}
	ms := newScope(m.scope)
	for i, p := range d.params {
		switch {
		case i < len(args):
			ms.vars[p] = args[i]
		default:
			if v, ok := kw.Get(p); ok {
				ms.vars[p] = v
			} else if d.defaults[i] != nil {
				v, err := r.eval(d.defaults[i], ms)
				if err != nil {
					return nil, err
				}
				ms.vars[p] = v
			} else {
				ms.vars[p] = undef("parameter '%s' was not provided", p)
			}
		}
	}
	for _, k := range kw.keys {
		ks, _ := k.(string)
		if ks == "caller" {
			ms.vars["caller"] = kw.m[k]
			continue
		}
		found := false
		for i, p := range d.params {
			if p == ks {
				found = true
				if i < len(args) {
					return nil, fmt.Errorf("TypeError: macro '%s' got multiple values for argument '%s'", d.name, ks)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("TypeError: macro '%s' takes no keyword argument '%s'", d.name, ks)
		}
	}
	r.depth++
	defer func() { r.depth-- }()
	out, err := r.capture(d.body, ms)
	if err == errBreak || err == errContinue {
		err = fmt.Errorf("break or continue outside a loop")
	}
	return out, err
}
