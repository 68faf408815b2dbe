package chattmpl

import (
	"fmt"
	"math"
	"strings"
)

// Python's binary operators on template values: comparison, membership,
// arithmetic, concatenation, repetition and %-formatting.

// unaryOp is Python's not, unary - and unary +.
func unaryOp(op string, v any) (any, error) {
	switch op {
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

// arith applies an arithmetic operator: numbers first, with Python's int and
// float rules, then the sequence forms (concatenation, repetition, %-format).
func arith(op string, l, r any) (any, error) {
	if v, ok, err := numArith(op, l, r); ok {
		return v, err
	}
	return seqArith(op, l, r)
}

// numArith is arith on two numbers (bool counts as int); ok is false when
// either operand is not a number or op is not arithmetic.
func numArith(op string, l, r any) (v any, ok bool, err error) {
	li, lint := asInt(l)
	ri, rint := asInt(r)
	lf, lnum := asFloat(l)
	rf, rnum := asFloat(r)
	if !lnum || !rnum {
		return nil, false, nil
	}
	both := lint && rint
	switch op {
	case "+":
		if both {
			return li + ri, true, nil
		}
		return lf + rf, true, nil
	case "-":
		if both {
			return li - ri, true, nil
		}
		return lf - rf, true, nil
	case "*":
		if both {
			return li * ri, true, nil
		}
		return lf * rf, true, nil
	case "/":
		if rf == 0 {
			return nil, true, fmt.Errorf("ZeroDivisionError: division by zero")
		}
		return lf / rf, true, nil
	case "//":
		if rf == 0 {
			return nil, true, fmt.Errorf("ZeroDivisionError: integer division or modulo by zero")
		}
		if both {
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, true, nil
		}
		return math.Floor(lf / rf), true, nil
	case "%":
		if rf == 0 {
			return nil, true, fmt.Errorf("ZeroDivisionError: integer division or modulo by zero")
		}
		if both {
			m := li % ri
			if m != 0 && (m < 0) != (ri < 0) {
				m += ri
			}
			return m, true, nil
		}
		m := math.Mod(lf, rf)
		if m != 0 && (m < 0) != (rf < 0) {
			m += rf
		}
		return m, true, nil
	case "**":
		if both && ri >= 0 {
			res := int64(1)
			for range min(ri, 64) {
				res *= li
			}
			return res, true, nil
		}
		return math.Pow(lf, rf), true, nil
	}
	return nil, false, nil
}

// seqArith is arith on strings, lists and tuples: + concatenates, * repeats
// (bounded by the render limits) and string % args formats.
func seqArith(op string, l, r any) (any, error) {
	ri, rint := asInt(r)
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
