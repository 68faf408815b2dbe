package chattmpl

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Render limits: a template that hits one fails instead of running away.
const (
	maxOutput    = 8 << 20   // bytes of output
	maxSteps     = 1_000_000 // loop iterations, macro calls and filter items
	maxCallDepth = 200       // nested macro calls
	maxAlloc     = 256 << 20 // bytes of strings built by operators, filters and calls
)

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type scope struct {
	vars   map[string]any
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]any{}, parent: parent} }

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type renderer struct {
	out   *strings.Builder
	steps int
	depth int
	alloc int // bytes of strings built so far
}

type macro struct {
	def   *macroDef
	scope *scope // where it was defined
	r     *renderer
}

type loopObj struct {
	items []any
	i     int
}

func (r *renderer) step() error {
	r.steps++
	if r.steps > maxSteps {
		return fmt.Errorf("template exceeded %d steps", maxSteps)
	}
	return nil
}

// built counts the strings an operation built against maxAlloc, so that a
// loop cannot copy megabytes a million times.
func (r *renderer) built(v any, err error) (any, error) {
	if s, ok := v.(string); ok && err == nil {
		r.alloc += len(s)
		if r.alloc > maxAlloc {
			return nil, fmt.Errorf("template built more than %d bytes of strings", maxAlloc)
		}
	}
	return v, err
}

func (r *renderer) write(s string) error {
	if r.out.Len()+len(s) > maxOutput {
		return fmt.Errorf("template output exceeded %d bytes", maxOutput)
	}
	if r.alloc += len(s); r.alloc > maxAlloc { // captured output counts too
		return fmt.Errorf("template built more than %d bytes of strings", maxAlloc)
	}
	r.out.WriteString(s)
	return nil
}

// capture renders nodes into a string.
func (r *renderer) capture(nodes []node, s *scope) (string, error) {
	old := r.out
	var b strings.Builder
	r.out = &b
	err := r.exec(nodes, s)
	r.out = old
	if err == nil && old.Len()+b.Len() > maxOutput {
		err = fmt.Errorf("template output exceeded %d bytes", maxOutput)
	}
	return b.String(), err
}

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
		out := make([]any, len(e.items))
		for i, x := range e.items {
			v, err := r.eval(x, s)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *tupleExpr:
		out := make(tuple, len(e.items))
		for i, x := range e.items {
			v, err := r.eval(x, s)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *dictExpr:
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
		switch e.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch x := v.(type) {
			case int64:
				return -x, nil
			case bool:
				i, _ := asInt(x)
				return -i, nil
			case float64:
				return -x, nil
			case *undefined:
				return nil, x.err()
			}
			return nil, fmt.Errorf("TypeError: bad operand type for unary -: '%s'", typeName(v))
		default:
			if isNumber(v) {
				if b, ok := v.(bool); ok {
					i, _ := asInt(b)
					return i, nil
				}
				return v, nil
			}
			if u, ok := v.(*undefined); ok {
				return nil, u.err()
			}
			return nil, fmt.Errorf("TypeError: bad operand type for unary +: '%s'", typeName(v))
		}
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
	return nil, fmt.Errorf("internal error: unknown expression %T", e)
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

var dictMethods = map[string]bool{"get": true, "items": true, "keys": true, "values": true, "pop": true, "update": true,
	"setdefault": true, "copy": true, "clear": true, "popitem": true}
var listMethods = map[string]bool{"append": true, "pop": true, "index": true, "count": true, "insert": true, "extend": true,
	"remove": true, "reverse": true, "sort": true, "copy": true, "clear": true}

// getAttr is jinja2's obj.name: an attribute (method) first, then an item.
func getAttr(obj any, name string) (any, error) {
	obj = plain(obj)
	if strings.HasPrefix(name, "_") {
		return undef("access to attribute '%s' of '%s' object is unsafe", name, typeName(obj)), nil
	}
	switch x := obj.(type) {
	case *undefined:
		return nil, x.err()
	case *Dict:
		if dictMethods[name] {
			return &method{x, name}, nil
		}
		if v, ok := x.Get(name); ok {
			return v, nil
		}
		return undef("'dict object' has no attribute '%s'", name), nil
	case string:
		if strMethods[name] {
			return &method{x, name}, nil
		}
	case []any:
		if listMethods[name] {
			return &method{x, name}, nil
		}
	case tuple:
		if name == "index" || name == "count" {
			return &method{x, name}, nil
		}
	case *namespace:
		if v, ok := x.d.Get(name); ok {
			return v, nil
		}
	case *loopObj:
		return x.attr(name), nil
	}
	return undef("'%s object' has no attribute '%s'", typeName(obj), name), nil
}

// getItem is jinja2's obj[key]: an item first, then an attribute.
func getItem(obj any, key any) (any, error) {
	obj, key = plain(obj), plain(key)
	switch x := obj.(type) {
	case *undefined:
		return nil, x.err()
	case *Dict:
		if v, ok := x.Get(key); ok {
			return v, nil
		}
	case []any, tuple, string:
		if i, ok := asInt(key); ok {
			var n int
			switch y := x.(type) {
			case []any:
				n = len(y)
			case tuple:
				n = len(y)
			case string:
				n = utf8.RuneCountInString(y)
			}
			if i < 0 {
				i += int64(n)
			}
			if i >= 0 && i < int64(n) {
				switch y := x.(type) {
				case []any:
					return y[i], nil
				case tuple:
					return y[i], nil
				case string:
					return string([]rune(y)[i]), nil
				}
			}
			return undef("index out of range"), nil
		}
	}
	if name, ok := key.(string); ok {
		return getAttr(obj, name)
	}
	return undef("'%s object' has no item %s", typeName(obj), pyRepr(key)), nil
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

func binOp(op string, l, r any) (any, error) {
	switch op {
	case "~":
		s := pyStr(l) + pyStr(r)
		if len(s) > maxOutput {
			return nil, fmt.Errorf("string exceeded %d bytes", maxOutput)
		}
		return s, nil
	case "==":
		return pyEq(l, r), nil
	case "!=":
		return !pyEq(l, r), nil
	case "<", "<=", ">", ">=":
		c, err := pyCompare(l, r)
		if err != nil {
			return nil, err
		}
		switch op {
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		}
		return c >= 0, nil
	case "+":
		if v, ok := markupAdd(l, r); ok {
			return v, nil
		}
	case "in", "not in":
		in, err := pyIn(l, r)
		if err != nil {
			return nil, err
		}
		return in == (op == "in"), nil
	}
	l, r = plain(l), plain(r)
	if u, ok := l.(*undefined); ok {
		return nil, u.err()
	}
	if u, ok := r.(*undefined); ok {
		return nil, u.err()
	}
	return arith(op, l, r)
}

func pyIn(item, container any) (bool, error) {
	item, container = plain(item), plain(container)
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, ok := item.(*undefined); ok {
				return false, u.err()
			}
			return false, fmt.Errorf("TypeError: 'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case []any:
		for _, x := range c {
			if pyEq(item, x) {
				return true, nil
			}
		}
		return false, nil
	case tuple:
		for _, x := range c {
			if pyEq(item, x) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		if !hashable(item) {
			return false, fmt.Errorf("TypeError: unhashable type: '%s'", typeName(item))
		}
		_, ok := c.Get(item)
		return ok, nil
	case *undefined:
		return false, nil
	}
	return false, fmt.Errorf("TypeError: argument of type '%s' is not iterable", typeName(container))
}

func arith(op string, l, r any) (any, error) {
	li, lint := asInt(l)
	ri, rint := asInt(r)
	lf, lnum := asFloat(l)
	rf, rnum := asFloat(r)
	if lnum && rnum {
		both := lint && rint
		switch op {
		case "+":
			if both {
				return li + ri, nil
			}
			return lf + rf, nil
		case "-":
			if both {
				return li - ri, nil
			}
			return lf - rf, nil
		case "*":
			if both {
				return li * ri, nil
			}
			return lf * rf, nil
		case "/":
			if rf == 0 {
				return nil, fmt.Errorf("ZeroDivisionError: division by zero")
			}
			return lf / rf, nil
		case "//":
			if rf == 0 {
				return nil, fmt.Errorf("ZeroDivisionError: integer division or modulo by zero")
			}
			if both {
				q := li / ri
				if (li%ri != 0) && ((li < 0) != (ri < 0)) {
					q--
				}
				return q, nil
			}
			return math.Floor(lf / rf), nil
		case "%":
			if rf == 0 {
				return nil, fmt.Errorf("ZeroDivisionError: integer division or modulo by zero")
			}
			if both {
				m := li % ri
				if m != 0 && (m < 0) != (ri < 0) {
					m += ri
				}
				return m, nil
			}
			m := math.Mod(lf, rf)
			if m != 0 && (m < 0) != (rf < 0) {
				m += rf
			}
			return m, nil
		case "**":
			if both && ri >= 0 {
				res := int64(1)
				for range min(ri, 64) {
					res *= li
				}
				return res, nil
			}
			return math.Pow(lf, rf), nil
		}
	}
	switch op {
	case "+":
		switch x := l.(type) {
		case string:
			if y, ok := r.(string); ok {
				return x + y, nil
			}
		case []any:
			if y, ok := r.([]any); ok {
				return append(append([]any{}, x...), y...), nil
			}
		case tuple:
			if y, ok := r.(tuple); ok {
				return append(append(tuple{}, x...), y...), nil
			}
		}
	case "*":
		if s, ok := l.(string); ok && rint {
			if ri < 0 {
				ri = 0
			}
			if int64(len(s))*ri > maxOutput {
				return nil, fmt.Errorf("string exceeded %d bytes", maxOutput)
			}
			return strings.Repeat(s, int(ri)), nil
		}
		if x, ok := l.([]any); ok && rint {
			if int64(len(x))*ri > maxSteps {
				return nil, fmt.Errorf("list too long")
			}
			var out []any
			for range max(ri, 0) {
				out = append(out, x...)
			}
			return out, nil
		}
	case "%":
		if s, ok := l.(string); ok {
			return percentFormat(s, r)
		}
	}
	return nil, fmt.Errorf("TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

// percentFormat is Python's "fmt" % args for %s, %d, %r, %f and %%.
func percentFormat(f string, arg any) (any, error) {
	var args []any
	if t, ok := arg.(tuple); ok {
		args = t
	} else {
		args = []any{arg}
	}
	var b strings.Builder
	ai := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		i++
		if i >= len(f) {
			return nil, fmt.Errorf("ValueError: incomplete format")
		}
		if f[i] == '%' {
			b.WriteByte('%')
			continue
		}
		if ai >= len(args) {
			return nil, fmt.Errorf("TypeError: not enough arguments for format string")
		}
		a := args[ai]
		ai++
		switch f[i] {
		case 's':
			b.WriteString(pyStr(a))
		case 'r':
			b.WriteString(pyRepr(a))
		case 'd', 'i':
			if n, ok := asInt(a); ok {
				fmt.Fprintf(&b, "%d", n)
			} else if x, ok := a.(float64); ok {
				fmt.Fprintf(&b, "%d", int64(x))
			} else {
				return nil, fmt.Errorf("TypeError: %%d format: a real number is required, not %s", typeName(a))
			}
		case 'f':
			x, ok := asFloat(a)
			if !ok {
				return nil, fmt.Errorf("TypeError: must be real number, not %s", typeName(a))
			}
			fmt.Fprintf(&b, "%f", x)
		default:
			return nil, fmt.Errorf("unsupported format character %q", f[i])
		}
	}
	if ai < len(args) {
		return nil, fmt.Errorf("TypeError: not all arguments converted during string formatting")
	}
	return b.String(), nil
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
