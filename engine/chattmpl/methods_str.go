package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python's str methods, as templates call them: s.split(), s.startswith(), ...

var strMethods = map[string]bool{
	"startswith": true, "endswith": true, "strip": true, "lstrip": true, "rstrip": true, "split": true, "rsplit": true,
	"upper": true, "lower": true, "replace": true, "title": true, "capitalize": true, "format": true, "join": true,
	"find": true, "rfind": true, "count": true, "isdigit": true, "isalpha": true, "isalnum": true, "isspace": true,
	"isupper": true, "islower": true, "splitlines": true, "index": true, "rindex": true, "swapcase": true,
	"removeprefix": true, "removesuffix": true, "zfill": true, "casefold": true,
}

func strMethod(s string, m *method, args []any, kw *Dict) (any, error) {
	if m.name != "format" && kw.Len() > 0 && m.name != "split" && m.name != "rsplit" && m.name != "splitlines" && m.name != "replace" {
		return nil, fmt.Errorf("TypeError: %s() takes no keyword arguments", m.name)
	}
	switch m.name {
	case "startswith", "endswith":
		return strHasAffix(s, m, args)
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
		return strSwapcase(s), nil
	case "title":
		return strTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "replace":
		return strReplace(s, m, args, kw)
	case "join":
		return strJoin(s, m, args)
	case "find", "rfind", "index", "rindex", "count":
		return strFind(s, m, args)
	case "isdigit", "isalpha", "isalnum", "isspace":
		return strIsClass(s, m.name), nil
	case "isupper", "islower":
		return strIsCase(s, m.name), nil
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

// strHasAffix is str.startswith and str.endswith, with a str or a tuple of str.
func strHasAffix(s string, m *method, args []any) (any, error) {
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
}

// strSwapcase is str.swapcase.
func strSwapcase(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsUpper(r) {
			return unicode.ToLower(r)
		}
		return unicode.ToUpper(r)
	}, s)
}

// strTitle is str.title: a cased letter after a letter is lowered, any other
// is titled.
func strTitle(s string) string {
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
	return b.String()
}

// strReplace is str.replace(old, new[, count]).
func strReplace(s string, m *method, args []any, kw *Dict) (any, error) {
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
}

// strJoin is str.join: every item must already be a str, as in Python.
func strJoin(s string, m *method, args []any) (any, error) {
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
}

// strFind is str.find, rfind, index, rindex and count; positions count runes.
func strFind(s string, m *method, args []any) (any, error) {
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
}

// strIsClass is str.isdigit, isalpha, isalnum and isspace: false for "".
func strIsClass(s, name string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		ok := false
		switch name {
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
			return false
		}
	}
	return true
}

// strIsCase is str.isupper and str.islower: true when some rune is cased and
// none has the other case.
func strIsCase(s, name string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsLower(r) {
			cased = true
			if name == "isupper" && unicode.IsLower(r) || name == "islower" && unicode.IsUpper(r) {
				return false
			}
		}
	}
	return cased
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
