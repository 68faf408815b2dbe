package chattmpl

import "fmt"

// The filter and test registries, and the helpers every filter uses to read
// its arguments.

type filterFn func(r *renderer, v any, args []any, kw *Dict) (any, error)
type testFn func(r *renderer, v any, args []any) (bool, error)

var filters map[string]filterFn
var tests map[string]testFn

// arg returns the i-th positional argument or the keyword name, or def.
func arg(args []any, kw *Dict, i int, name string, def any) any {
	if i < len(args) {
		return args[i]
	}
	if kw != nil {
		if v, ok := kw.Get(name); ok {
			return v
		}
	}
	return def
}

func mustString(v any, what string) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case *undefined:
		return "", x.err()
	}
	return "", fmt.Errorf("TypeError: %s must be str, not %s", what, typeName(v))
}

// init registers the built-in filters and tests. It runs in init, not in the
// variable declarations, because some of them look up filters and tests by name.
func init() {
	filters = map[string]filterFn{}
	for _, table := range []map[string]filterFn{valueFilters(), stringFilters(), sequenceFilters(), orderFilters(), numberFilters()} {
		for name, f := range table {
			if _, dup := filters[name]; dup {
				panic("chattmpl: filter " + name + " registered twice")
			}
			filters[name] = f
		}
	}
	tests = builtinTests()
}

// valueFilters are the filters that take any value: conversion, escaping, defaults.
func valueFilters() map[string]filterFn {
	return map[string]filterFn{
		"tojson": filterToJSON,
		"string": func(r *renderer, v any, a []any, kw *Dict) (any, error) { return pyStr(v), nil },
		"safe": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			if m, ok := v.(markup); ok {
				return m, nil
			}
			return markup(pyStr(v)), nil
		},
		"e":       filterEscape,
		"escape":  filterEscape,
		"default": filterDefault,
		"d":       filterDefault,
		"attr":    filterAttr,
	}
}

func intArg(v any) (int64, error) {
	n, ok := asInt(v)
	if !ok {
		if u, isU := v.(*undefined); isU {
			return 0, u.err()
		}
		if f, isF := v.(float64); isF {
			return int64(f), nil
		}
		return 0, fmt.Errorf("TypeError: expected a number, got %s", typeName(v))
	}
	return n, nil
}

func filterEscape(r *renderer, v any, a []any, kw *Dict) (any, error) {
	return escapeHTML(v), nil
}

func filterDefault(r *renderer, v any, a []any, kw *Dict) (any, error) {
	def := arg(a, kw, 0, "default_value", "")
	boolean := truthy(arg(a, kw, 1, "boolean", false))
	if _, u := v.(*undefined); u || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

// filterAttr is attr(name): an attribute only, never an item.
func filterAttr(r *renderer, v any, a []any, kw *Dict) (any, error) {
	name := pyStr(arg(a, kw, 0, "name", ""))
	switch x := v.(type) {
	case *undefined:
		return nil, x.err()
	case *Dict:
		if !dictMethods[name] {
			return undef("'dict object' has no attribute '%s'", name), nil
		}
	}
	return getAttr(v, name)
}
