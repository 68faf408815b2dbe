package chattmpl

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values are Python-like: nil (None), bool, int64, float64, string, []any
// (list), tuple, *Dict, *namespace, *undefined, *macro, Func, *method,
// *loopObj.

type tuple []any

// Dict is an insertion-ordered mapping, as Python's dict.
type Dict struct {
	keys []any
	m    map[any]any
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{m: map[any]any{}} }

// Set adds or replaces k (a string, int64, float64, bool or nil).
func (d *Dict) Set(k, v any) {
	k = hashKey(k)
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// Get returns k's value.
func (d *Dict) Get(k any) (any, bool) {
	if !hashable(k) {
		return nil, false
	}
	v, ok := d.m[hashKey(k)]
	return v, ok
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

func hashable(k any) bool {
	switch k.(type) {
	case nil, bool, int64, float64, string, int, markup:
		return true
	}
	return false
}

func hashKey(k any) any {
	switch x := k.(type) {
	case markup:
		return string(x)
	case int:
		return int64(x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return int64(x)
		}
	}
	return k
}

type namespace struct{ d *Dict }

// undefined is jinja2's Undefined: empty when printed or iterated, an error
// for most other uses.
type undefined struct {
	hint string // what was undefined, for errors
}

func (u *undefined) err() error {
	return fmt.Errorf("UndefinedError: %s", u.hint)
}

func undef(format string, args ...any) *undefined {
	return &undefined{fmt.Sprintf(format, args...)}
}

// Func is a Go function a template can call, like raise_exception.
type Func func(args []any, kwargs *Dict) (any, error)

// method is a bound method of a string, dict, list or loop.
type method struct {
	recv any
	name string
}

// FromGo converts Go values (maps, slices, numbers, strings, Message) to
// template values. Map keys are sorted, as Go maps have no order.
func FromGo(v any) any {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *Dict, tuple, Func, *undefined, *namespace:
		return v
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case float32:
		return float64(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = FromGo(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case Message:
		d := NewDict()
		d.Set("role", x.Role)
		d.Set("content", x.Content)
		return d
	case []Message:
		out := make([]any, len(x))
		for i, m := range x {
			out[i] = FromGo(m)
		}
		return out
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			d.Set(k, FromGo(x[k]))
		}
		return d
	case func(string) string:
		return Func(func(args []any, kw *Dict) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("TypeError: expected 1 argument")
			}
			s, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("TypeError: expected a string argument")
			}
			return x(s), nil
		})
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = FromGo(rv.Index(i).Interface())
		}
		return out
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(rv.Uint())
	case reflect.String:
		return rv.String()
	case reflect.Bool:
		return rv.Bool()
	case reflect.Float32, reflect.Float64:
		return rv.Float()
	}
	return fmt.Sprint(v)
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case tuple:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	case markup:
		return x != ""
	case *undefined:
		return false
	}
	return true
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *macro:
		return "Macro"
	case *loopObj:
		return "LoopContext"
	case Func, *method:
		return "builtin_function_or_method"
	case markup:
		return "Markup"
	case *generator:
		return "generator"
	}
	return fmt.Sprintf("%T", v)
}

// pyStr is Python's str().
func pyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case markup:
		return string(x)
	case *undefined:
		return ""
	}
	return pyRepr(v)
}

// pyRepr is Python's repr().
func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

func writeRepr(b *strings.Builder, v any, depth int) {
	if depth > 100 {
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(pyFloat(x))
	case string:
		b.WriteString(reprString(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, depth+1)
		}
		b.WriteByte(']')
	case tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, depth+1)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1)
			b.WriteString(": ")
			writeRepr(b, x.m[k], depth+1)
		}
		b.WriteByte('}')
	case markup:
		b.WriteString("Markup(" + reprString(string(x)) + ")")
	case *generator:
		b.WriteString(x.String())
	case *undefined:
		b.WriteString("Undefined")
	case *namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.d, depth+1)
		b.WriteString(">")
	case *macro:
		fmt.Fprintf(b, "<Macro '%s'>", x.def.name)
	default:
		fmt.Fprintf(b, "<%s object>", typeName(v))
	}
}

// pyFloat is Python's repr of a float.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expS, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expS)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s = strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func reprString(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f:
			b.WriteRune(r)
		case !unicode.IsPrint(r) && r != ' ':
			switch {
			case r <= 0xff:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

func isNumber(v any) bool {
	switch v.(type) {
	case bool, int64, float64:
		return true
	}
	return false
}

// asInt returns v as an integer if it is a bool or int.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	if f, ok := v.(float64); ok {
		return f, true
	}
	if i, ok := asInt(v); ok {
		return float64(i), true
	}
	return 0, false
}

// pyEq is Python's ==.
func pyEq(a, b any) bool {
	a, b = plain(a), plain(b)
	if isNumber(a) && isNumber(b) {
		ai, aok := asInt(a)
		bi, bok := asInt(b)
		if aok && bok {
			return ai == bi
		}
		af, _ := asFloat(a)
		bf, _ := asFloat(b)
		return af == bf
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		return ok && seqEq(x, y)
	case tuple:
		y, ok := b.(tuple)
		return ok && seqEq(x, y)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.keys {
			yv, ok := y.m[k]
			if !ok || !pyEq(x.m[k], yv) {
				return false
			}
		}
		return true
	case *undefined:
		_, ok := b.(*undefined)
		return ok
	}
	return a == b
}

func seqEq(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !pyEq(a[i], b[i]) {
			return false
		}
	}
	return true
}

// pyCompare orders a and b as Python's < does: -1, 0, 1.
func pyCompare(a, b any) (int, error) {
	a, b = plain(a), plain(b)
	if isNumber(a) && isNumber(b) {
		af, _ := asFloat(a)
		bf, _ := asFloat(b)
		ai, aok := asInt(a)
		bi, bok := asInt(b)
		switch {
		case aok && bok && ai < bi, !(aok && bok) && af < bf:
			return -1, nil
		case aok && bok && ai > bi, !(aok && bok) && af > bf:
			return 1, nil
		}
		return 0, nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case []any:
		if y, ok := b.([]any); ok {
			return seqCompare(x, y)
		}
	case tuple:
		if y, ok := b.(tuple); ok {
			return seqCompare(x, y)
		}
	}
	if u, ok := a.(*undefined); ok {
		return 0, u.err()
	}
	if u, ok := b.(*undefined); ok {
		return 0, u.err()
	}
	return 0, fmt.Errorf("TypeError: '<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func seqCompare(a, b []any) (int, error) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if pyEq(a[i], b[i]) {
			continue
		}
		return pyCompare(a[i], b[i])
	}
	switch {
	case len(a) < len(b):
		return -1, nil
	case len(a) > len(b):
		return 1, nil
	}
	return 0, nil
}

// iterate returns the items a for loop over v visits.
func iterate(v any) ([]any, error) {
	switch x := plain(v).(type) {
	case *generator:
		return x.take(), nil
	case []any:
		return x, nil
	case tuple:
		return x, nil
	case *Dict:
		return append([]any(nil), x.keys...), nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case *undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("TypeError: '%s' object is not iterable", typeName(v))
}

func pyLen(v any) (int, error) {
	switch x := plain(v).(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case []any:
		return len(x), nil
	case tuple:
		return len(x), nil
	case *Dict:
		return x.Len(), nil
	case *undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("TypeError: object of type '%s' has no len()", typeName(v))
}
