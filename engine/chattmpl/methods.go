package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

var strMethods = map[string]bool{
	"startswith": true, "endswith": true, "strip": true, "lstrip": true, "rstrip": true, "split": true, "rsplit": true,
	"upper": true, "lower": true, "replace": true, "title": true, "capitalize": true, "format": true, "join": true,
	"find": true, "rfind": true, "count": true, "isdigit": true, "isalpha": true, "isalnum": true, "isspace": true,
	"isupper": true, "islower": true, "splitlines": true, "index": true, "rindex": true, "swapcase": true,
	"removeprefix": true, "removesuffix": true, "zfill": true, "casefold": true,
}

func nargs(m *method, args []any, lo, hi int) error {
	if len(args) < lo || len(args) > hi {
		return fmt.Errorf("TypeError: %s.%s() takes %d to %d arguments (%d given)", typeName(m.recv), m.name, lo, hi, len(args))
	}
	return nil
}

func (r *renderer) callMethod(m *method, args []any, kw *Dict) (any, error) {
	switch x := m.recv.(type) {
	case string:
		return strMethod(x, m, args, kw)
	case *Dict:
		return dictMethod(x, m, args, kw)
	case []any, tuple:
		var items []any
		if l, ok := x.([]any); ok {
			items = l
		} else {
			items = x.(tuple)
		}
		switch m.name {
		case "index":
			if err := nargs(m, args, 1, 1); err != nil {
				return nil, err
			}
			for i, it := range items {
				if pyEq(it, args[0]) {
					return int64(i), nil
				}
			}
			return nil, fmt.Errorf("ValueError: %s is not in list", pyRepr(args[0]))
		case "count":
			if err := nargs(m, args, 1, 1); err != nil {
				return nil, err
			}
			n := int64(0)
			for _, it := range items {
				if pyEq(it, args[0]) {
					n++
				}
			}
			return n, nil
		case "copy":
			return append([]any{}, items...), nil
		}
		return nil, fmt.Errorf("SecurityError: access to attribute '%s' of '%s' object is unsafe", m.name, typeName(x))
	case *loopObj:
		if m.name == "cycle" {
			if len(args) == 0 {
				return nil, fmt.Errorf("TypeError: no items for cycling given")
			}
			return args[x.i%len(args)], nil
		}
	}
	return nil, fmt.Errorf("TypeError: cannot call %s", m.name)
}

func dictMethod(d *Dict, m *method, args []any, kw *Dict) (any, error) {
	switch m.name {
	case "get":
		if err := nargs(m, args, 1, 2); err != nil {
			return nil, err
		}
		if !hashable(args[0]) {
			return nil, fmt.Errorf("TypeError: unhashable type: '%s'", typeName(args[0]))
		}
		if v, ok := d.Get(args[0]); ok {
			return v, nil
		}
		if len(args) == 2 {
			return args[1], nil
		}
		return nil, nil
	case "items":
		return dictItems(d), nil
	case "keys":
		return append([]any{}, d.keys...), nil
	case "values":
		out := make([]any, len(d.keys))
		for i, k := range d.keys {
			out[i] = d.m[k]
		}
		return out, nil
	case "copy":
		c := NewDict()
		for _, k := range d.keys {
			c.Set(k, d.m[k])
		}
		return c, nil
	}
	return nil, fmt.Errorf("SecurityError: access to attribute '%s' of 'dict' object is unsafe", m.name)
}

// strStrip is str.strip/lstrip/rstrip with optional chars.
func strStrip(s string, chars any, left, right bool) (any, error) {
	f := pySpace
	switch c := chars.(type) {
	case nil:
	case string:
		f = func(r rune) bool { return strings.ContainsRune(c, r) }
	case *undefined:
		return nil, c.err()
	default:
		return nil, fmt.Errorf("TypeError: strip arg must be None or str")
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s, nil
}

func pySplit(s string, sep any, maxsplit int64, fromRight bool) (any, error) {
	var parts []string
	switch x := sep.(type) {
	case nil:
		// Runs of whitespace; leading and trailing whitespace ignored.
		fields := strings.FieldsFunc(s, pySpace)
		if maxsplit < 0 || int64(len(fields)) <= maxsplit+1 {
			parts = fields
			break
		}
		if fromRight {
			// Keep the leftmost remainder intact.
			rest := strings.TrimRightFunc(s, pySpace)
			for i := int64(0); i < maxsplit; i++ {
				j := strings.LastIndexFunc(rest, pySpace)
				parts = append([]string{rest[j+1:]}, parts...)
				rest = strings.TrimRightFunc(rest[:j+1], pySpace)
			}
			parts = append([]string{strings.TrimLeftFunc(rest, pySpace)}, parts...)
		} else {
			rest := strings.TrimLeftFunc(s, pySpace)
			for i := int64(0); i < maxsplit; i++ {
				j := strings.IndexFunc(rest, pySpace)
				parts = append(parts, rest[:j])
				rest = strings.TrimLeftFunc(rest[j:], pySpace)
			}
			parts = append(parts, rest)
		}
	case string:
		if x == "" {
			return nil, fmt.Errorf("ValueError: empty separator")
		}
		switch {
		case maxsplit < 0:
			parts = strings.Split(s, x)
		case fromRight:
			all := strings.Split(s, x)
			if int64(len(all)) > maxsplit+1 {
				k := len(all) - int(maxsplit)
				parts = append([]string{strings.Join(all[:k], x)}, all[k:]...)
			} else {
				parts = all
			}
		default:
			parts = strings.SplitN(s, x, int(maxsplit)+1)
		}
	case *undefined:
		return nil, x.err()
	default:
		return nil, fmt.Errorf("TypeError: must be str or None, not %s", typeName(sep))
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func prefixes(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case tuple:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("TypeError: tuple for startswith must only contain str")
			}
			out[i] = s
		}
		return out, nil
	case *undefined:
		return nil, x.err()
	}
	return nil, fmt.Errorf("TypeError: startswith first arg must be str or a tuple of str, not %s", typeName(v))
}

func strMethod(s string, m *method, args []any, kw *Dict) (any, error) {
	if m.name != "format" && kw.Len() > 0 && m.name != "split" && m.name != "rsplit" && m.name != "splitlines" && m.name != "replace" {
		return nil, fmt.Errorf("TypeError: %s() takes no keyword arguments", m.name)
	}
	switch m.name {
	case "startswith", "endswith":
		if err := nargs(m, args, 1, 1); err != nil {
			return nil, err
		}
		ps, err := prefixes(args[0])
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if m.name == "startswith" && strings.HasPrefix(s, p) || m.name == "endswith" && strings.HasSuffix(s, p) {
				return true, nil
			}
		}
		return false, nil
	case "strip", "lstrip", "rstrip":
		if err := nargs(m, args, 0, 1); err != nil {
			return nil, err
		}
		return strStrip(s, arg(args, nil, 0, "", nil), m.name != "rstrip", m.name != "lstrip")
	case "split", "rsplit":
		if err := nargs(m, args, 0, 2); err != nil {
			return nil, err
		}
		ms, err := intArg(arg(args, kw, 1, "maxsplit", int64(-1)))
		if err != nil {
			return nil, err
		}
		return pySplit(s, arg(args, kw, 0, "sep", nil), ms, m.name == "rsplit")
	case "splitlines":
		out := []any{}
		for _, l := range pySplitLines(s, truthy(arg(args, kw, 0, "keepends", false))) {
			out = append(out, l)
		}
		return out, nil
	case "upper":
		return strings.ToUpper(s), nil
	case "lower", "casefold":
		return strings.ToLower(s), nil
	case "swapcase":
		return strings.Map(func(r rune) rune {
			if unicode.IsUpper(r) {
				return unicode.ToLower(r)
			}
			return unicode.ToUpper(r)
		}, s), nil
	case "title":
		var b strings.Builder
		prevCased := false
		for _, r := range s {
			if prevCased {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prevCased = unicode.IsLetter(r)
		}
		return b.String(), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "replace":
		if err := nargs(m, args, 2, 3); err != nil {
			return nil, err
		}
		old, err := mustString(args[0], "replace() argument 1")
		if err != nil {
			return nil, err
		}
		nw, err := mustString(args[1], "replace() argument 2")
		if err != nil {
			return nil, err
		}
		n, err := intArg(arg(args, kw, 2, "count", int64(-1)))
		if err != nil {
			return nil, err
		}
		return pyReplace(s, old, nw, n)
	case "join":
		if err := nargs(m, args, 1, 1); err != nil {
			return nil, err
		}
		items, err := iterate(args[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			p, ok := it.(string)
			if !ok {
				return nil, fmt.Errorf("TypeError: sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = p
		}
		return strings.Join(parts, s), nil
	case "find", "rfind", "index", "rindex", "count":
		if err := nargs(m, args, 1, 1); err != nil {
			return nil, err
		}
		sub, err := mustString(args[0], m.name+"() argument")
		if err != nil {
			return nil, err
		}
		var i int
		switch m.name {
		case "count":
			if sub == "" {
				return int64(utf8.RuneCountInString(s) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		case "find", "index":
			i = strings.Index(s, sub)
		default:
			i = strings.LastIndex(s, sub)
		}
		if i < 0 {
			if m.name == "index" || m.name == "rindex" {
				return nil, fmt.Errorf("ValueError: substring not found")
			}
			return int64(-1), nil
		}
		return int64(utf8.RuneCountInString(s[:i])), nil
	case "isdigit", "isalpha", "isalnum", "isspace":
		if s == "" {
			return false, nil
		}
		for _, r := range s {
			ok := false
			switch m.name {
			case "isdigit":
				ok = unicode.IsDigit(r)
			case "isalpha":
				ok = unicode.IsLetter(r)
			case "isalnum":
				ok = unicode.IsLetter(r) || unicode.IsDigit(r)
			case "isspace":
				ok = pySpace(r)
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	case "isupper", "islower":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsLower(r) {
				cased = true
				if m.name == "isupper" && unicode.IsLower(r) || m.name == "islower" && unicode.IsUpper(r) {
					return false, nil
				}
			}
		}
		return cased, nil
	case "removeprefix", "removesuffix":
		if err := nargs(m, args, 1, 1); err != nil {
			return nil, err
		}
		p, err := mustString(args[0], m.name+"() argument")
		if err != nil {
			return nil, err
		}
		if m.name == "removeprefix" {
			return strings.TrimPrefix(s, p), nil
		}
		return strings.TrimSuffix(s, p), nil
	case "zfill":
		w, err := intArg(arg(args, nil, 0, "", int64(0)))
		if err != nil {
			return nil, err
		}
		n := int64(utf8.RuneCountInString(s))
		if w <= n || w > maxOutput {
			return s, nil
		}
		return strings.Repeat("0", int(w-n)) + s, nil
	case "format":
		return strFormat(s, args, kw)
	}
	return nil, fmt.Errorf("TypeError: str has no method %s", m.name)
}

// strFormat is str.format with plain fields: {}, {0}, {name}, {name.attr},
// conversions !s/!r and no format spec beyond an empty one.
func strFormat(f string, args []any, kw *Dict) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c == '}' {
			if i+1 < len(f) && f[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return nil, fmt.Errorf("ValueError: Single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(f) && f[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(f[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("ValueError: Single '{' encountered in format string")
		}
		field := f[i+1 : i+end]
		i += end
		conv := ""
		if k := strings.IndexByte(field, ':'); k >= 0 {
			if field[k+1:] != "" {
				return nil, fmt.Errorf("str.format spec %q is not supported", field[k+1:])
			}
			field = field[:k]
		}
		if k := strings.IndexByte(field, '!'); k >= 0 {
			conv = field[k+1:]
			field = field[:k]
		}
		name, rest, _ := strings.Cut(field, ".")
		var v any
		switch {
		case name == "":
			if auto >= len(args) {
				return nil, fmt.Errorf("IndexError: Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case name[0] >= '0' && name[0] <= '9':
			n, err := strconv.Atoi(name)
			if err != nil || n >= len(args) {
				return nil, fmt.Errorf("IndexError: Replacement index %s out of range", name)
			}
			v = args[n]
		default:
			x, ok := kw.Get(name)
			if !ok {
				return nil, fmt.Errorf("KeyError: %s", pyRepr(name))
			}
			v = x
		}
		if rest != "" {
			for _, a := range strings.Split(rest, ".") {
				var err error
				if v, err = getAttr(v, a); err != nil {
					return nil, err
				}
			}
		}
		switch conv {
		case "", "s":
			b.WriteString(pyStr(v))
		case "r":
			b.WriteString(pyRepr(v))
		default:
			return nil, fmt.Errorf("ValueError: Unknown conversion specifier %s", conv)
		}
	}
	return b.String(), nil
}

// globals are the functions every template sees.
func globals(now func() time.Time) map[string]any {
	return map[string]any{
		"range": Func(pyRange),
		"dict":  Func(func(args []any, kw *Dict) (any, error) { return dictFrom(args, kw) }),
		"namespace": Func(func(args []any, kw *Dict) (any, error) {
			d, err := dictFrom(args, kw)
			if err != nil {
				return nil, err
			}
			return &namespace{d}, nil
		}),
		"raise_exception": Func(raiseException),
		"strftime_now":    StrftimeNow(now()),
	}
}

func raiseException(args []any, kw *Dict) (any, error) {
	msg := ""
	if len(args) > 0 {
		msg = pyStr(args[0])
	}
	return nil, &TemplateError{Msg: msg}
}

// TemplateError is what a template's raise_exception(msg) returns.
type TemplateError struct{ Msg string }

func (e *TemplateError) Error() string { return "TemplateError: " + e.Msg }

func dictFrom(args []any, kw *Dict) (*Dict, error) {
	d := NewDict()
	if len(args) > 1 {
		return nil, fmt.Errorf("TypeError: expected at most 1 argument")
	}
	if len(args) == 1 {
		switch x := args[0].(type) {
		case *Dict:
			for _, k := range x.keys {
				d.Set(k, x.m[k])
			}
		default:
			items, err := iterate(x)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				pair, err := iterate(it)
				if err != nil || len(pair) != 2 {
					return nil, fmt.Errorf("ValueError: dictionary update sequence element has wrong length")
				}
				if !hashable(pair[0]) {
					return nil, fmt.Errorf("TypeError: unhashable type")
				}
				d.Set(pair[0], pair[1])
			}
		}
	}
	for _, k := range kw.keys {
		d.Set(k, kw.m[k])
	}
	return d, nil
}

// maxRange is jinja2's sandbox limit on range().
const maxRange = 100000

func pyRange(args []any, kw *Dict) (any, error) {
	var n [3]int64
	n[2] = 1
	for i, a := range args {
		v, ok := asInt(a)
		if !ok {
			return nil, fmt.Errorf("TypeError: '%s' object cannot be interpreted as an integer", typeName(a))
		}
		n[i] = v
	}
	start, stop, step := n[0], n[1], n[2]
	switch len(args) {
	case 1:
		start, stop = 0, n[0]
	case 2, 3:
	default:
		return nil, fmt.Errorf("TypeError: range expected 1 to 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return nil, fmt.Errorf("ValueError: range() arg 3 must not be zero")
	}
	var out []any
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if len(out) >= maxRange {
			return nil, fmt.Errorf("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
		}
		out = append(out, i)
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

// StrftimeNow returns a strftime_now function that formats now, for a
// Context (tests pass FixedNow for reproducible output).
func StrftimeNow(now time.Time) Func {
	return func(args []any, kw *Dict) (any, error) {
		if len(args) != 1 {
			return nil, fmt.Errorf("TypeError: strftime_now() takes 1 argument")
		}
		f, err := mustString(args[0], "strftime_now() argument")
		if err != nil {
			return nil, err
		}
		return strftime(now, f), nil
	}
}

// strftime formats t as C's strftime (glibc, C locale) does.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) {
			pad = false
			i++
		}
		num := func(v, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, v)
			} else {
				fmt.Fprintf(&b, "%d", v)
			}
		}
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'j':
			num(t.YearDay(), 3)
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'Z', 'z':
			// Python formats a naive datetime (HF's datetime.now()): no zone.
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
