package chattmpl

import (
	"fmt"
	"strings"
)

// Jinja2 tests: the predicates of "x is name".

// builtinTests returns the tests jinja2 defines, by name; the comparison
// tests have their operator and word aliases (eq, equalto, ...).
func builtinTests() map[string]testFn {
	ts := map[string]testFn{
		"defined":   func(r *renderer, v any, a []any) (bool, error) { _, u := v.(*undefined); return !u, nil },
		"undefined": func(r *renderer, v any, a []any) (bool, error) { _, u := v.(*undefined); return u, nil },
		"none":      func(r *renderer, v any, a []any) (bool, error) { return v == nil, nil },
		"string":    func(r *renderer, v any, a []any) (bool, error) { _, ok := v.(string); return ok, nil },
		"mapping":   func(r *renderer, v any, a []any) (bool, error) { _, ok := v.(*Dict); return ok, nil },
		"boolean":   func(r *renderer, v any, a []any) (bool, error) { _, ok := v.(bool); return ok, nil },
		"true":      func(r *renderer, v any, a []any) (bool, error) { return v == true, nil },
		"false":     func(r *renderer, v any, a []any) (bool, error) { return v == false, nil },
		"number":    func(r *renderer, v any, a []any) (bool, error) { return isNumber(v), nil },
		"integer":   func(r *renderer, v any, a []any) (bool, error) { _, ok := v.(int64); return ok, nil },
		"float":     func(r *renderer, v any, a []any) (bool, error) { _, ok := v.(float64); return ok, nil },
		"iterable": func(r *renderer, v any, a []any) (bool, error) {
			switch v.(type) {
			case string, []any, tuple, *Dict, *undefined:
				return true, nil
			}
			return false, nil
		},
		"sequence": func(r *renderer, v any, a []any) (bool, error) {
			switch v.(type) {
			case string, []any, tuple, *Dict:
				return true, nil
			}
			return false, nil
		},
		"callable": func(r *renderer, v any, a []any) (bool, error) {
			switch v.(type) {
			case *macro, Func, *method:
				return true, nil
			}
			return false, nil
		},
		"sameas": func(r *renderer, v any, a []any) (bool, error) {
			o := arg(a, nil, 0, "", nil)
			switch v.(type) {
			case nil, bool:
				return v == o, nil
			}
			return isSame(v, o), nil
		},
		"odd":         func(r *renderer, v any, a []any) (bool, error) { n, err := intArg(v); return n%2 != 0, err },
		"even":        func(r *renderer, v any, a []any) (bool, error) { n, err := intArg(v); return n%2 == 0, err },
		"divisibleby": testDivisible,
		"lower":       func(r *renderer, v any, a []any) (bool, error) { s := pyStr(v); return s == strings.ToLower(s), nil },
		"upper":       func(r *renderer, v any, a []any) (bool, error) { s := pyStr(v); return s == strings.ToUpper(s), nil },
		"escaped":     func(r *renderer, v any, a []any) (bool, error) { return false, nil },
		"in": func(r *renderer, v any, a []any) (bool, error) {
			if len(a) != 1 {
				return false, fmt.Errorf("TypeError: test 'in' takes one argument")
			}
			return pyIn(v, a[0])
		},
		"filter": func(r *renderer, v any, a []any) (bool, error) { _, ok := filters[pyStr(v)]; return ok, nil },
		"test":   func(r *renderer, v any, a []any) (bool, error) { _, ok := tests[pyStr(v)]; return ok, nil },
	}
	cmp := func(ops ...string) testFn {
		return func(r *renderer, v any, a []any) (bool, error) {
			if len(a) != 1 {
				return false, fmt.Errorf("TypeError: comparison test takes one argument")
			}
			res, err := binOp(ops[0], v, a[0])
			return truthy(res), err
		}
	}
	for _, names := range [][]string{{"==", "eq", "equalto"}, {"!=", "ne"}, {"<", "lt", "lessthan"}, {"<=", "le"}, {">", "gt", "greaterthan"}, {">=", "ge"}} {
		for _, n := range names {
			ts[n] = cmp(names[0])
		}
	}
	return ts
}

func isSame(a, b any) bool {
	defer func() { _ = recover() }()
	return a == b
}

func testDivisible(r *renderer, v any, a []any) (bool, error) {
	if len(a) != 1 {
		return false, fmt.Errorf("TypeError: divisibleby takes one argument")
	}
	m, err := arith("%", v, a[0])
	if err != nil {
		return false, err
	}
	return !truthy(m), nil
}
