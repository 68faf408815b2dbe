package chattmpl

import (
	"fmt"
	"strings"
)

// markup is markupsafe's Markup, what the safe and escape filters return:
// a string that escapes plain strings added to it. chattmpl keeps it only
// as far as that matters (+, printing); elsewhere it is a plain string.
type markup string

// generator is a one-shot iterable, as select, map and the like return in
// jinja2: always true, without a length, not JSON.
type generator struct {
	items    []any
	consumed bool
}

func newGenerator(items []any) *generator { return &generator{items: items} }

// plain turns a markup into its string.
func plain(v any) any {
	if m, ok := v.(markup); ok {
		return string(m)
	}
	return v
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&#34;", "'", "&#39;")

// escapeHTML is markupsafe.escape.
func escapeHTML(v any) markup {
	if m, ok := v.(markup); ok {
		return m
	}
	return markup(htmlEscaper.Replace(pyStr(v)))
}

// markupAdd is Markup + str and str + Markup; ok is false when neither
// side is a markup or the other side is not a string.
func markupAdd(l, r any) (any, bool) {
	lm, lok := l.(markup)
	rm, rok := r.(markup)
	switch {
	case lok && rok:
		return lm + rm, true
	case lok:
		if s, ok := r.(string); ok {
			return lm + escapeHTML(s), true
		}
	case rok:
		if s, ok := l.(string); ok {
			return escapeHTML(s) + rm, true
		}
	}
	return nil, false
}

// markupFilters keep a markup input a markup (markupsafe's str methods do).
var markupFilters = map[string]bool{"trim": true, "upper": true, "lower": true, "string": true, "capitalize": true,
	"title": true, "indent": true, "center": true}

func (g *generator) take() []any {
	if g.consumed {
		return nil
	}
	g.consumed = true
	return g.items
}

func (g *generator) String() string { return fmt.Sprintf("<generator object at %p>", g) }
