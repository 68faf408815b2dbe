package chattmpl

import (
	"strings"
	"unicode/utf8"
)

// jinja2's attribute and item lookup: obj.name and obj[key].

var dictMethods = map[string]bool{"get": true, "items": true, "keys": true, "values": true, "pop": true, "update": true,
	"setdefault": true, "copy": true, "clear": true, "popitem": true}

var listMethods = map[string]bool{"append": true, "pop": true, "index": true, "count": true, "insert": true, "extend": true,
	"remove": true, "reverse": true, "sort": true, "copy": true, "clear": true}

// getAttr is jinja2's obj.name: an attribute (method) first, then an item.
func getAttr(obj any, name string) (any, error) {
	obj = plain(obj)
	if strings.HasPrefix(name, "_") {
		return undef("access to attribute '%s' of '%s' object is unsafe", name, typeName(obj)), nil
	}
	switch x := obj.(type) {
	case *undefined:
		return nil, x.err()
	case *Dict:
		if dictMethods[name] {
			return &method{x, name}, nil
		}
		if v, ok := x.Get(name); ok {
			return v, nil
		}
		return undef("'dict object' has no attribute '%s'", name), nil
	case string:
		if strMethods[name] {
			return &method{x, name}, nil
		}
	case []any:
		if listMethods[name] {
			return &method{x, name}, nil
		}
	case tuple:
		if name == "index" || name == "count" {
			return &method{x, name}, nil
		}
	case *namespace:
		if v, ok := x.d.Get(name); ok {
			return v, nil
		}
	case *loopObj:
		return x.attr(name), nil
	}
	return undef("'%s object' has no attribute '%s'", typeName(obj), name), nil
}

// getItem is jinja2's obj[key]: an item first, then an attribute.
func getItem(obj any, key any) (any, error) {
	obj, key = plain(obj), plain(key)
	switch x := obj.(type) {
	case *undefined:
		return nil, x.err()
	case *Dict:
		if v, ok := x.Get(key); ok {
			return v, nil
		}
	case []any, tuple, string:
		if i, ok := asInt(key); ok {
			var n int
			switch y := x.(type) {
			case []any:
				n = len(y)
			case tuple:
				n = len(y)
			case string:
				n = utf8.RuneCountInString(y)
			}
			if i < 0 {
				i += int64(n)
			}
			if i >= 0 && i < int64(n) {
				switch y := x.(type) {
				case []any:
					return y[i], nil
				case tuple:
					return y[i], nil
				case string:
					return string([]rune(y)[i]), nil
				}
			}
			return undef("index out of range"), nil
		}
	}
	if name, ok := key.(string); ok {
		return getAttr(obj, name)
	}
	return undef("'%s object' has no item %s", typeName(obj), pyRepr(key)), nil
}
