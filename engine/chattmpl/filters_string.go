package chattmpl

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String filters: case, trimming, replacing, indenting, centring, formatting.

// stringFilters work on the string form of a value.
func stringFilters() map[string]filterFn {
	return map[string]filterFn{
		"trim": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			return strStrip(pyStr(v), arg(a, kw, 0, "chars", nil), true, true)
		},
		"upper":      func(r *renderer, v any, a []any, kw *Dict) (any, error) { return strings.ToUpper(pyStr(v)), nil },
		"lower":      func(r *renderer, v any, a []any, kw *Dict) (any, error) { return strings.ToLower(pyStr(v)), nil },
		"capitalize": func(r *renderer, v any, a []any, kw *Dict) (any, error) { return pyCapitalize(pyStr(v)), nil },
		"title":      filterTitle,
		"replace":    filterReplace,
		"indent":     filterIndent,
		"center":     filterCenter,
		"format":     filterFormat,
		"wordcount": func(r *renderer, v any, a []any, kw *Dict) (any, error) {
			return int64(len(strings.FieldsFunc(pyStr(v), func(r rune) bool { return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') }))), nil
		},
	}
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

func filterFormat(r *renderer, v any, a []any, kw *Dict) (any, error) {
	if len(a) == 1 {
		return percentFormat(pyStr(v), a[0])
	}
	return percentFormat(pyStr(v), tuple(a))
}
