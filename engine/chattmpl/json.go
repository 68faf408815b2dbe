package chattmpl

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// tojson: jinja2's filter over Python's json.dumps, byte for byte.

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

type jsonOpts struct {
	indent          string
	hasIndent       bool
	itemSep, keySep string
	sortKeys, ascii bool
}

// toJSON is Python's json.dumps.
func toJSON(b *strings.Builder, v any, o *jsonOpts, level int) error {
	v = plain(v)
	if level > 200 {
		return fmt.Errorf("RecursionError: nesting too deep for tojson")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		jsonFloat(b, x)
	case string:
		jsonString(b, x, o.ascii)
	case []any:
		return jsonArray(b, x, o, level)
	case tuple:
		return jsonArray(b, x, o, level)
	case *Dict:
		return jsonObject(b, x, o, level)
	default:
		return fmt.Errorf("TypeError: Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// newline starts a line at the given nesting level when indenting.
func (o *jsonOpts) newline(b *strings.Builder, level int) {
	if o.hasIndent {
		b.WriteByte('\n')
		for range level {
			b.WriteString(o.indent)
		}
	}
}

// jsonFloat writes a float as Python does, NaN and infinities included.
func jsonFloat(b *strings.Builder, x float64) {
	switch {
	case math.IsNaN(x):
		b.WriteString("NaN")
	case math.IsInf(x, 1):
		b.WriteString("Infinity")
	case math.IsInf(x, -1):
		b.WriteString("-Infinity")
	default:
		b.WriteString(pyFloat(x))
	}
}

func jsonArray(b *strings.Builder, items []any, o *jsonOpts, level int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, e := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		o.newline(b, level+1)
		if err := toJSON(b, e, o, level+1); err != nil {
			return err
		}
	}
	o.newline(b, level)
	b.WriteByte(']')
	return nil
}

func jsonObject(b *strings.Builder, d *Dict, o *jsonOpts, level int) error {
	if d.Len() == 0 {
		b.WriteString("{}")
		return nil
	}
	keys := d.keys
	if o.sortKeys {
		var err error
		if keys, err = sortedKeys(keys); err != nil {
			return err
		}
	}
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		o.newline(b, level+1)
		ks, err := jsonKey(k)
		if err != nil {
			return err
		}
		jsonString(b, ks, o.ascii)
		b.WriteString(o.keySep)
		if err := toJSON(b, d.m[k], o, level+1); err != nil {
			return err
		}
	}
	o.newline(b, level)
	b.WriteByte('}')
	return nil
}

// sortedKeys is sort_keys=True: a sorted copy, failing as Python does on
// keys that do not compare.
func sortedKeys(keys []any) ([]any, error) {
	keys = append([]any(nil), keys...)
	var serr error
	sort.SliceStable(keys, func(i, j int) bool {
		c, err := pyCompare(keys[i], keys[j])
		if err != nil {
			serr = err
		}
		return c < 0
	})
	return keys, serr
}

// jsonKey is the string json.dumps writes for a dict key.
func jsonKey(k any) (string, error) {
	switch kk := k.(type) {
	case string:
		return kk, nil
	case nil:
		return "null", nil
	case bool:
		return map[bool]string{true: "true", false: "false"}[kk], nil
	case int64:
		return strconv.FormatInt(kk, 10), nil
	case float64:
		return pyFloat(kk), nil
	}
	return "", fmt.Errorf("TypeError: keys must be str, int, float, bool or None, not %s", typeName(k))
}

func jsonString(b *strings.Builder, s string, ascii bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || ascii && r > 0x7e && r <= 0xffff:
				fmt.Fprintf(b, `\u%04x`, r)
			case ascii && r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
