package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SchemaError names the part of a JSON Schema Orrery cannot enforce, by
// its JSON pointer.
type SchemaError struct {
	Pointer string
	Msg     string
}

func (e *SchemaError) Error() string {
	p := e.Pointer
	if p == "" {
		p = "/" // the root, as users read it
	}
	return fmt.Sprintf("json schema at %s: %s", p, e.Msg)
}

// Bounds that keep every generated value finite, so that even a model
// that emits noise ends its JSON (llama.cpp bounds digits the same way).
const (
	maxIntDigits  = 16
	maxFracDigits = 16
	maxExpDigits  = 2 // 1e99 fits a float64; 1e999 does not
	// maxSpace bounds the indentation after a newline.
	maxSpace = 20
	// maxBound bounds minLength/maxLength and minItems/maxItems, each of
	// which costs a rule per step.
	maxBound = 1000
)

// annotations are keywords that do not constrain a value.
var annotations = []string{"title", "description", "default", "examples", "$schema", "$id", "$comment",
	"deprecated", "readOnly", "writeOnly", "$defs", "definitions"}

// schemaCompiler turns one schema document into rules.
type schemaCompiler struct {
	b    *builder
	doc  any
	refs map[string]int32 // rule of each $ref target, made once (recursion)
	// shared rules, made on first use
	wsRule, strRule, numRule, intRule, anyRule seq
}

func (c *schemaCompiler) fail(ptr, format string, args ...any) error {
	return &SchemaError{Pointer: ptr, Msg: fmt.Sprintf(format, args...)}
}

// compile is the rule for the schema s found at pointer ptr.
func (c *schemaCompiler) compile(s any, ptr string) (seq, error) {
	switch s := s.(type) {
	case bool:
		if !s {
			return nil, c.fail(ptr, "false matches no value")
		}
		return c.anyValue()
	case *object:
		return c.compileObject(s, ptr)
	}
	return nil, c.fail(ptr, "a schema must be an object or a boolean")
}

func (c *schemaCompiler) compileObject(s *object, ptr string) (seq, error) {
	known := map[string]bool{}
	for _, k := range annotations {
		known[k] = true
	}
	for _, k := range []string{"type", "properties", "required", "additionalProperties", "items", "minItems",
		"maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "format",
		"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		known[k] = true
	}
	for _, k := range s.keys {
		if !known[k] {
			return nil, c.fail(ptr+"/"+escapePointer(k), "keyword %q is not supported (supported: %s)", k, supportedKeywords)
		}
	}
	if r, ok := s.get("$ref"); ok {
		return c.ref(r, ptr+"/$ref")
	}
	if v, ok := s.get("const"); ok {
		return c.literal(v), nil
	}
	if v, ok := s.get("enum"); ok {
		vs, isArr := v.([]any)
		if !isArr || len(vs) == 0 {
			return nil, c.fail(ptr+"/enum", "want a non-empty array")
		}
		alts := make([]seq, len(vs))
		for i, x := range vs {
			alts[i] = c.literal(x)
		}
		return c.b.alt(alts...)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if v, ok := s.get(k); ok {
			// oneOf is enforced as anyOf: the grammar cannot exclude a
			// value that matches two branches.
			return c.branches(v, ptr+"/"+k)
		}
	}
	if v, ok := s.get("allOf"); ok {
		vs, isArr := v.([]any)
		if !isArr || len(vs) != 1 {
			return nil, c.fail(ptr+"/allOf", "only an allOf of one schema is supported")
		}
		return c.compile(vs[0], ptr+"/allOf/0")
	}
	t, hasType := s.get("type")
	if !hasType {
		if _, ok := s.get("properties"); ok {
			t = "object"
		} else if _, ok := s.get("items"); ok {
			t = "array"
		} else {
			return c.anyValue()
		}
	}
	switch t := t.(type) {
	case string:
		return c.typed(s, t, ptr)
	case []any:
		var alts []seq
		for i, x := range t {
			name, ok := x.(string)
			if !ok {
				return nil, c.fail(ptr+"/type/"+strconv.Itoa(i), "want a type name")
			}
			r, err := c.typed(s, name, ptr)
			if err != nil {
				return nil, err
			}
			alts = append(alts, r)
		}
		if len(alts) == 0 {
			return nil, c.fail(ptr+"/type", "an empty list of types matches no value")
		}
		return c.b.alt(alts...)
	}
	return nil, c.fail(ptr+"/type", "want a type name or a list of them")
}

// supportedKeywords lists what compileObject enforces, for errors and docs.
const supportedKeywords = "type, properties, required, additionalProperties, items, minItems, maxItems, " +
	"enum, const, anyOf, oneOf, allOf of one schema, $ref within the document, minLength, maxLength, " +
	"format date, time, date-time and uuid, minimum/maximum (and exclusive) on integers"

func (c *schemaCompiler) typed(s *object, t, ptr string) (seq, error) {
	switch t {
	case "object":
		return c.object(s, ptr)
	case "array":
		return c.array(s, ptr)
	case "string":
		return c.stringOf(s, ptr)
	case "number":
		for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
			if _, ok := s.get(k); ok {
				return nil, c.fail(ptr+"/"+k, "bounds are supported on integers, not on numbers")
			}
		}
		return c.number()
	case "integer":
		lo, hi, hasLo, hasHi, err := c.intBounds(s, ptr)
		if err != nil {
			return nil, err
		}
		return c.intRange(lo, hi, hasLo, hasHi)
	case "boolean":
		return c.b.alt(c.b.lit("true"), c.b.lit("false"))
	case "null":
		return c.b.lit("null"), nil
	}
	return nil, c.fail(ptr+"/type", "unknown type %q", t)
}

func (c *schemaCompiler) branches(v any, ptr string) (seq, error) {
	vs, ok := v.([]any)
	if !ok || len(vs) == 0 {
		return nil, c.fail(ptr, "want a non-empty array of schemas")
	}
	alts := make([]seq, len(vs))
	for i, x := range vs {
		r, err := c.compile(x, ptr+"/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		alts[i] = r
	}
	return c.b.alt(alts...)
}

// ref is the rule of a $ref within the document ("#", "#/$defs/x", any
// JSON pointer after "#"). A target's rule is made once, before its body,
// so that recursive schemas work.
func (c *schemaCompiler) ref(v any, ptr string) (seq, error) {
	r, ok := v.(string)
	if !ok || !strings.HasPrefix(r, "#") {
		return nil, c.fail(ptr, "only references within the document (\"#/…\") are supported, got %v", v)
	}
	target := r[1:]
	if rule, ok := c.refs[target]; ok {
		return ref(rule), nil
	}
	s, ok := resolvePointer(c.doc, target)
	if !ok {
		return nil, c.fail(ptr, "%q points to nothing in the document", r)
	}
	rule, err := c.b.newRule()
	if err != nil {
		return nil, err
	}
	c.refs[target] = rule
	body, err := c.compile(s, target)
	if err != nil {
		return nil, err
	}
	c.b.define(rule, body)
	return ref(rule), nil
}

func (c *schemaCompiler) literal(v any) seq {
	var sb strings.Builder
	encodeJSON(&sb, v)
	return c.b.lit(sb.String())
}

// bound reads a non-negative integer keyword (-1 when absent).
func (c *schemaCompiler) bound(s *object, k, ptr string) (int, error) {
	v, ok := s.get(k)
	if !ok {
		return -1, nil
	}
	n, isNum := v.(json.Number)
	i, err := strconv.Atoi(string(n))
	if !isNum || err != nil || i < 0 || i > maxBound {
		return 0, c.fail(ptr+"/"+k, "want an integer 0..%d", maxBound)
	}
	return i, nil
}

func (c *schemaCompiler) bounds(s *object, lo, hi, ptr string) (int, int, error) {
	min, err := c.bound(s, lo, ptr)
	if err != nil {
		return 0, 0, err
	}
	max, err := c.bound(s, hi, ptr)
	if err != nil {
		return 0, 0, err
	}
	min = slices.Max([]int{min, 0})
	if max >= 0 && max < min {
		return 0, 0, c.fail(ptr+"/"+hi, "%s %d is below %s %d", hi, max, lo, min)
	}
	return min, max, nil
}
