package chattmpl

import "fmt"

// Method calls on template values: list, tuple, dict and loop methods here,
// str methods in methods_str.go.

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
