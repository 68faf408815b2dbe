package chattmpl

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

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

func init() {
	filters = map[string]filterFn{
		"tojson": filterToJSON,
		"trim": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			return strStrip(pyStr(v), arg(a, kw, 0, "chars", nil), true, true)
		},
		"length": filterLength,
		"count":  filterLength,
		"upper":  func(r *renderer, v any, a []any, kw *Dict) (any, error) { return strings.ToUpper(pyStr(v)), nil },
		"lower":  func(r *renderer, v any, a []any, kw *Dict) (any, error) { return strings.ToLower(pyStr(v)), nil },
		"string": func(r *renderer, v any, a []any, kw *Dict) (any, error) { return pyStr(v), nil },
		"safe": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			if m, ok := v.(markup); ok {
				return m, nil
			}
			return markup(pyStr(v)), nil
		},
		"e":          filterEscape,
		"escape":     filterEscape,
		"capitalize": func(r *renderer, v any, a []any, kw *Dict) (any, error) { return pyCapitalize(pyStr(v)), nil },
		"title":      filterTitle,
		"replace":    filterReplace,
		"join":       filterJoin,
		"first":      filterFirst,
		"last":       filterLast,
		"list":       filterList,
		"items":      filterItems,
		"default":    filterDefault,
		"d":          filterDefault,
		"int":        filterInt,
		"float":      filterFloat,
		"abs":        filterAbs,
		"indent":     filterIndent,
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
		"map":      filterMap,
		"dictsort": filterDictsort,
		"unique":   filterUnique,
		"sort":     filterSort,
		"reverse":  filterReverse,
		"min":      func(r *renderer, v any, a []any, kw *Dict) (any, error) { return minMax(v, kw, -1) },
		"max":      func(r *renderer, v any, a []any, kw *Dict) (any, error) { return minMax(v, kw, 1) },
		"sum":      filterSum,
		"round":    filterRound,
		"wordcount": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			return int64(len(strings.FieldsFunc(pyStr(v), func(r rune) bool { return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') }))), nil
		},
		"attr":   filterAttr,
		"center": filterCenter,
		"batch":  filterBatch,
		"format": filterFormat,
	}
	tests = map[string]testFn{
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
			tests[n] = cmp(names[0])
		}
	}
}

func isSame(a, b any) bool {
	defer func() { _ = recover() }()
	return a == b
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

func filterToJSON(r *renderer, v any, a []any, kw *Dict) (any, error) {
	if len(a) > 0 && kw.Len() == 0 {
		// tojson(x, ensure_ascii, indent, separators, sort_keys) positionally.
		for i, n := range []string{"ensure_ascii", "indent", "separators", "sort_keys"} {
			if i < len(a) {
				kw.Set(n, a[i])
			}
		}
	}
	for _, k := range kw.keys {
		switch k {
		case "ensure_ascii", "indent", "separators", "sort_keys":
		default:
			return nil, fmt.Errorf("TypeError: tojson() got an unexpected keyword argument %s", pyRepr(k))
		}
	}
	ea, _ := kw.Get("ensure_ascii")
	indentV, _ := kw.Get("indent")
	var indent string
	hasIndent := false
	switch x := indentV.(type) {
	case nil:
	case int64:
		hasIndent = true
		indent = strings.Repeat(" ", int(max(x, 0)))
	case bool:
		hasIndent = true
		if x {
			indent = " "
		}
	case string:
		hasIndent = true
		indent = x
	default:
		return nil, fmt.Errorf("TypeError: bad indent %s", typeName(indentV))
	}
	itemSep, keySep := ", ", ": "
	if hasIndent {
		itemSep = ","
	}
	if sep, ok := kw.Get("separators"); ok && sep != nil {
		items, err := iterate(sep)
		if err != nil || len(items) != 2 {
			return nil, fmt.Errorf("ValueError: separators must be a pair")
		}
		is, ok1 := items[0].(string)
		ks, ok2 := items[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("TypeError: separators must be strings")
		}
		itemSep, keySep = is, ks
	}
	sortKeys := false
	if sk, ok := kw.Get("sort_keys"); ok {
		sortKeys = truthy(sk)
	}
	var b strings.Builder
	o := jsonOpts{indent: indent, hasIndent: hasIndent, itemSep: itemSep, keySep: keySep, sortKeys: sortKeys, ascii: truthy(ea)}
	if err := toJSON(&b, v, &o, 0); err != nil {
		return nil, err
	}
	return b.String(), nil
}

func filterLength(r *renderer, v any, a []any, kw *Dict) (any, error) {
	n, err := pyLen(v)
	return int64(n), err
}

func filterEscape(r *renderer, v any, a []any, kw *Dict) (any, error) {
	return escapeHTML(v), nil
}

func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + strings.ToLower(s[n:])
}

var titleSplit = regexp.MustCompile(`[-\s({\[<]+`)

func filterTitle(r *renderer, v any, a []any, kw *Dict) (any, error) {
	s := pyStr(v)
	var b strings.Builder
	last := 0
	for _, m := range titleSplit.FindAllStringIndex(s, -1) {
		b.WriteString(pyCapitalize(s[last:m[0]]))
		b.WriteString(s[m[0]:m[1]])
		last = m[1]
	}
	b.WriteString(pyCapitalize(s[last:]))
	return b.String(), nil
}

func filterReplace(r *renderer, v any, a []any, kw *Dict) (any, error) {
	old, err := mustString(arg(a, kw, 0, "old", nil), "replace() argument 1")
	if err != nil {
		return nil, err
	}
	nw, err := mustString(arg(a, kw, 1, "new", nil), "replace() argument 2")
	if err != nil {
		return nil, err
	}
	n := int64(-1)
	if c := arg(a, kw, 2, "count", nil); c != nil {
		if n, err = intArg(c); err != nil {
			return nil, err
		}
	}
	return pyReplace(pyStr(v), old, nw, n)
}

func pyReplace(s, old, nw string, n int64) (any, error) {
	if n < 0 {
		n = -1
	}
	if old == "" && int64(len(nw))*int64(len(s)+1) > maxOutput {
		return nil, fmt.Errorf("string exceeded %d bytes", maxOutput)
	}
	if old != "" && len(nw) > len(old) && int64(strings.Count(s, old))*int64(len(nw)) > maxOutput {
		return nil, fmt.Errorf("string exceeded %d bytes", maxOutput)
	}
	return strings.Replace(s, old, nw, int(n)), nil
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

func filterDefault(r *renderer, v any, a []any, kw *Dict) (any, error) {
	def := arg(a, kw, 0, "default_value", "")
	boolean := truthy(arg(a, kw, 1, "boolean", false))
	if _, u := v.(*undefined); u || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func filterInt(r *renderer, v any, a []any, kw *Dict) (any, error) {
	def := arg(a, kw, 0, "default", int64(0))
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		n, _ := asInt(x)
		return n, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.TrimFunc(x, pySpace)
		s = strings.ReplaceAll(s, "_", "")
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return int64(f), nil
		}
	}
	return def, nil
}

func filterFloat(r *renderer, v any, a []any, kw *Dict) (any, error) {
	def := arg(a, kw, 0, "default", 0.0)
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64, bool:
		f, _ := asFloat(x)
		return f, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimFunc(x, pySpace), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func filterAbs(r *renderer, v any, a []any, kw *Dict) (any, error) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return -x, nil
		}
		return x, nil
	case bool:
		n, _ := asInt(x)
		return n, nil
	case float64:
		return math.Abs(x), nil
	}
	return nil, fmt.Errorf("TypeError: bad operand type for abs(): '%s'", typeName(v))
}

func filterIndent(r *renderer, v any, a []any, kw *Dict) (any, error) {
	w := arg(a, kw, 0, "width", int64(4))
	var ind string
	switch x := w.(type) {
	case string:
		ind = x
	default:
		n, err := intArg(x)
		if err != nil {
			return nil, err
		}
		if n > maxOutput {
			return nil, fmt.Errorf("indent too wide")
		}
		ind = strings.Repeat(" ", int(max(n, 0)))
	}
	first := truthy(arg(a, kw, 1, "first", false))
	blank := truthy(arg(a, kw, 2, "blank", false))
	s := pyStr(v) + "\n"
	lines := pySplitLines(s, false)
	if int64(len(lines))*int64(len(ind)) > maxOutput {
		return nil, fmt.Errorf("string exceeded %d bytes", maxOutput)
	}
	var rv string
	if blank {
		rv = strings.Join(lines, "\n"+ind)
	} else {
		var b strings.Builder
		b.WriteString(lines[0])
		if len(lines) > 1 {
			b.WriteString("\n")
			for i, l := range lines[1:] {
				if i > 0 {
					b.WriteString("\n")
				}
				if l != "" {
					b.WriteString(ind)
				}
				b.WriteString(l)
			}
		}
		rv = b.String()
	}
	if first {
		rv = ind + rv
	}
	return rv, nil
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

func sortKey(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func sortItems(items []any, key func(any) (any, error), reverse bool) ([]any, error) {
	out := append([]any{}, items...)
	keys := make([]any, len(out))
	for i, it := range out {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	var serr error
	sort.SliceStable(idx, func(i, j int) bool {
		c, err := pyCompare(keys[idx[i]], keys[idx[j]])
		if err != nil {
			serr = err
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	if serr != nil {
		return nil, serr
	}
	res := make([]any, len(out))
	for i, k := range idx {
		res[i] = out[k]
	}
	return res, nil
}

func filterDictsort(r *renderer, v any, a []any, kw *Dict) (any, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("TypeError: dictsort needs a mapping")
	}
	cs := truthy(arg(a, kw, 0, "case_sensitive", false))
	by := pyStr(arg(a, kw, 1, "by", "key"))
	rev := truthy(arg(a, kw, 2, "reverse", false))
	pos := 0
	if by == "value" {
		pos = 1
	}
	return sortItems(dictItems(d), func(it any) (any, error) { return sortKey(it.(tuple)[pos], cs), nil }, rev)
}

func filterSort(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	rev := truthy(arg(a, kw, 0, "reverse", false))
	cs := truthy(arg(a, kw, 1, "case_sensitive", false))
	attr := arg(a, kw, 2, "attribute", nil)
	return sortItems(items, func(it any) (any, error) {
		if attr != nil {
			x, err := attrPath(it, attr)
			return sortKey(x, cs), err
		}
		return sortKey(it, cs), nil
	}, rev)
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

func minMax(v any, kw *Dict, sign int) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undef("No aggregated item, sequence was empty."), nil
	}
	cs, _ := kw.Get("case_sensitive")
	attr, _ := kw.Get("attribute")
	best := items[0]
	key := func(x any) (any, error) {
		if attr != nil {
			y, err := attrPath(x, attr)
			return sortKey(y, truthy(cs)), err
		}
		return sortKey(x, truthy(cs)), nil
	}
	bk, err := key(best)
	if err != nil {
		return nil, err
	}
	for _, it := range items[1:] {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		c, err := pyCompare(k, bk)
		if err != nil {
			return nil, err
		}
		if c*sign > 0 {
			best, bk = it, k
		}
	}
	return best, nil
}

func filterSum(r *renderer, v any, a []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr := arg(a, kw, 0, "attribute", nil)
	total := arg(a, kw, 1, "start", int64(0))
	for _, it := range items {
		if attr != nil {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		if total, err = binOp("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterRound(r *renderer, v any, a []any, kw *Dict) (any, error) {
	prec, err := intArg(arg(a, kw, 0, "precision", int64(0)))
	if err != nil {
		return nil, err
	}
	method := pyStr(arg(a, kw, 1, "method", "common"))
	f, ok := asFloat(v)
	if !ok {
		return nil, fmt.Errorf("TypeError: round needs a number")
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "common": // Python's round: half to even
		return math.RoundToEven(f*p) / p, nil
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	return nil, fmt.Errorf("FilterArgumentError: method must be common, ceil or floor")
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

func filterCenter(r *renderer, v any, a []any, kw *Dict) (any, error) {
	w, err := intArg(arg(a, kw, 0, "width", int64(80)))
	if err != nil {
		return nil, err
	}
	s := pyStr(v)
	n := int64(utf8.RuneCountInString(s))
	if w <= n {
		return s, nil
	}
	if w > maxOutput {
		return nil, fmt.Errorf("string exceeded %d bytes", maxOutput)
	}
	pad := w - n
	left := pad / 2
	if pad%2 == 1 && w%2 == 1 {
		left++
	}
	return strings.Repeat(" ", int(left)) + s + strings.Repeat(" ", int(pad-left)), nil
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

func filterFormat(r *renderer, v any, a []any, kw *Dict) (any, error) {
	if len(a) == 1 {
		return percentFormat(pyStr(v), a[0])
	}
	return percentFormat(pyStr(v), tuple(a))
}
