package chattmpl

import (
	"fmt"
	"strings"
	"time"
)

// The globals every template sees: range, dict, namespace, raise_exception
// and strftime_now.

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
