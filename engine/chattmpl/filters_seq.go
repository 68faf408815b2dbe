package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
)

// Sequence filters: picking, joining, selecting, mapping and batching the items
// of lists, tuples, dicts and strings.

// sequenceFilters work on the items of a list, tuple, dict or string.
func sequenceFilters() map[string]filterFn {
	return map[string]filterFn{
		"length": filterLength,
		"count":  filterLength,
		"join":   filterJoin,
		"first":  filterFirst,
		"last":   filterLast,
		"list":   filterList,
		"items":  filterItems,
		"select": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			return selectReject(r, v, a, kw, false, true)
		},
		"reject": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			return selectReject(r, v, a, kw, false, false)
		},
		"selectattr": func(r *renderer, v any, a []any, kw *Dict) (any, error) { return selectReject(r, v, a, kw, true, true) },
		"rejectattr": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			return selectReject(r, v, a, kw, true, false)
		},
		"map":     filterMap,
		"unique":  filterUnique,
		"reverse": filterReverse,
		"batch":   filterBatch,
	}
}

func filterLength(r *renderer, v any, a []any, kw *Dict) (any, error) {
	n, err := pyLen(v)
	return int64(n), err
}

func filterJoin(r *renderer, v any, a []any, kw *Dict) (any, error) {
	sep := pyStr(arg(a, kw, 0, "d", ""))
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr := arg(a, kw, 1, "attribute", nil)
	parts := make([]string, len(items))
	size := 0
	for i, it := range items {
		if attr != nil {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		parts[i] = pyStr(it)
		size += len(parts[i]) + len(sep)
		if size > maxOutput {
			return nil, fmt.Errorf("string exceeded %d bytes", maxOutput)
		}
	}
	return strings.Join(parts, sep), nil
}

// attrPath is jinja2's make_attrgetter: "a.b.0" looks up items in turn.
func attrPath(v any, attr any) (any, error) {
	s, ok := attr.(string)
	if !ok {
		return getItem(v, attr)
	}
	for _, part := range strings.Split(s, ".") {
		var key any = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func filterFirst(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undef("No first item, sequence was empty."), nil
	}
	return items[0], nil
}

func filterLast(r *renderer, v any, a []any, kw *Dict) (any, error) {
	if _, ok := v.(*Dict); ok {
		return nil, fmt.Errorf("TypeError: 'dict' object is not reversible")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undef("No last item, sequence was empty."), nil
	}
	return items[len(items)-1], nil
}

func filterList(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

func dictItems(d *Dict) []any {
	out := make([]any, len(d.keys))
	for i, k := range d.keys {
		out[i] = tuple{k, d.m[k]}
	}
	return out
}

func filterItems(r *renderer, v any, a []any, kw *Dict) (any, error) {
	switch x := v.(type) {
	case *undefined:
		return newGenerator(nil), nil
	case *Dict:
		return newGenerator(dictItems(x)), nil
	}
	return nil, fmt.Errorf("TypeError: can only get item pairs from a mapping")
}

// selectReject is select/reject/selectattr/rejectattr.
func selectReject(r *renderer, v any, a []any, kw *Dict, byAttr, want bool) (any, error) {
	if !truthy(v) { // jinja2 skips a falsy sequence (None too)
		return newGenerator(nil), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var attr any
	if byAttr {
		if len(a) == 0 {
			return nil, fmt.Errorf("TypeError: missing attribute for selectattr/rejectattr")
		}
		attr, a = a[0], a[1:]
	}
	var test testFn
	var targs []any
	if len(a) > 0 {
		name := pyStr(a[0])
		t, ok := tests[name]
		if !ok {
			return nil, fmt.Errorf("TemplateRuntimeError: no test named '%s'", name)
		}
		test, targs = t, a[1:]
	}
	out := []any{}
	for _, it := range items {
		if err := r.step(); err != nil {
			return nil, err
		}
		x := it
		if byAttr {
			if x, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		ok := truthy(x)
		if test != nil {
			if ok, err = test(r, plain(x), targs); err != nil {
				return nil, err
			}
		}
		if ok == want {
			out = append(out, it)
		}
	}
	return newGenerator(out), nil
}

func filterMap(r *renderer, v any, a []any, kw *Dict) (any, error) {
	if !truthy(v) { // jinja2 skips a falsy sequence (None too)
		return newGenerator(nil), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(items))
	if attr, ok := kw.Get("attribute"); ok && len(a) == 0 {
		def, hasDef := kw.Get("default")
		for _, it := range items {
			x, err := attrPath(it, attr)
			if err != nil {
				return nil, err
			}
			if _, u := x.(*undefined); u && hasDef {
				x = def
			}
			out = append(out, x)
		}
		return newGenerator(out), nil
	}
	if len(a) == 0 {
		return nil, fmt.Errorf("TypeError: map requires a filter argument")
	}
	name := pyStr(a[0])
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("TemplateRuntimeError: no filter named '%s'", name)
	}
	for _, it := range items {
		if err := r.step(); err != nil {
			return nil, err
		}
		x, err := f(r, plain(it), a[1:], kw)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return newGenerator(out), nil
}

func filterUnique(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	cs := truthy(arg(a, kw, 0, "case_sensitive", false))
	attr := arg(a, kw, 1, "attribute", nil)
	var out, seen []any
	for _, it := range items {
		if err := r.step(); err != nil {
			return nil, err
		}
		k := it
		if attr != nil {
			if k, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		k = sortKey(k, cs)
		dup := false
		for _, s := range seen {
			if pyEq(s, k) {
				dup = true
				break
			}
		}
		if !dup {
			seen = append(seen, k)
			out = append(out, it)
		}
	}
	return newGenerator(out), nil
}

func filterReverse(r *renderer, v any, a []any, kw *Dict) (any, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	if _, ok := v.(*generator); ok {
		return out, nil // jinja2 reverses a copy into a list
	}
	return newGenerator(out), nil // reversed(): an iterator
}

func filterBatch(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	n, err := intArg(arg(a, kw, 0, "linecount", nil))
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("ValueError: batch size must be positive")
	}
	fill, hasFill := kw.Get("fill_with")
	if len(a) > 1 {
		fill, hasFill = a[1], true
	}
	var out []any
	for i := 0; i < len(items); i += int(n) {
		end := min(i+int(n), len(items))
		b := append([]any{}, items[i:end]...)
		for hasFill && fill != nil && len(b) < int(n) {
			b = append(b, fill)
		}
		out = append(out, b)
	}
	return newGenerator(out), nil
}
