package grammar

import (
	"strconv"
)

// ws is optional JSON whitespace, bounded: nothing, a space, or a
// newline and up to maxSpace spaces.
func (c *schemaCompiler) ws() (seq, error) {
	if c.wsRule != nil {
		return c.wsRule, nil
	}
	ind, err := c.b.rep(c.b.lit(" "), 0, maxSpace)
	if err != nil {
		return nil, err
	}
	r, err := c.b.alt(nil, c.b.lit(" "), cat(c.b.lit("\n"), ind))
	c.wsRule = r
	return r, err
}

// char is one character of a JSON string: valid UTF-8 other than '"',
// '\' and controls, or an escape.
func (c *schemaCompiler) char() (seq, error) {
	var plain, cont, c2, e1, ed, f0, f1, f4, hex, esc, e0 byteSet
	plain.addRange(0x20, 0x7f)
	plain[0] &^= 1 << '"'
	plain[1] &^= 1 << ('\\' - 64)
	cont.addRange(0x80, 0xbf)
	c2.addRange(0xc2, 0xdf)
	e0.add(0xe0)
	var e0b byteSet
	e0b.addRange(0xa0, 0xbf)
	e1.addRange(0xe1, 0xec)
	e1.addRange(0xee, 0xef)
	ed.add(0xed)
	var edb byteSet
	edb.addRange(0x80, 0x9f)
	f0.add(0xf0)
	var f0b byteSet
	f0b.addRange(0x90, 0xbf)
	f1.addRange(0xf1, 0xf3)
	f4.add(0xf4)
	var f4b byteSet
	f4b.addRange(0x80, 0x8f)
	hex.addRange('0', '9')
	hex.addRange('a', 'f')
	hex.addRange('A', 'F')
	for _, x := range `"\/bfnrt` {
		esc.add(byte(x))
	}
	b := c.b
	k := b.set(cont)
	return b.alt(
		b.set(plain),
		cat(b.set(c2), k),
		cat(b.set(e0), b.set(e0b), k),
		cat(b.set(e1), k, k),
		cat(b.set(ed), b.set(edb), k),
		cat(b.set(f0), b.set(f0b), k, k),
		cat(b.set(f1), k, k, k),
		cat(b.set(f4), b.set(f4b), k, k),
		cat(b.lit(`\`), b.alt2(b.set(esc), cat(b.lit("u"), b.set(hex), b.set(hex), b.set(hex), b.set(hex)))),
	)
}

// alt2 is alt for use inside an expression; a failure to make the rule
// (the grammar is too large) is kept by the builder and returned by build.
func (b *builder) alt2(alts ...seq) seq {
	s, err := b.alt(alts...)
	if err != nil {
		return nil
	}
	return s
}

// anyString is a JSON string of any length.
func (c *schemaCompiler) anyString() (seq, error) {
	if c.strRule != nil {
		return c.strRule, nil
	}
	ch, err := c.char()
	if err != nil {
		return nil, err
	}
	body, err := c.b.star(ch)
	if err != nil {
		return nil, err
	}
	r, err := c.b.alt(cat(c.b.lit(`"`), body, c.b.lit(`"`)))
	c.strRule = r
	return r, err
}

func (c *schemaCompiler) stringOf(s *object, ptr string) (seq, error) {
	if f, ok := s.get("format"); ok {
		return c.format(f, ptr+"/format")
	}
	min, max, err := c.bounds(s, "minLength", "maxLength", ptr)
	if err != nil {
		return nil, err
	}
	if min == 0 && max < 0 {
		return c.anyString()
	}
	ch, err := c.char()
	if err != nil {
		return nil, err
	}
	body, err := c.b.rep(ch, min, max)
	if err != nil {
		return nil, err
	}
	return cat(c.b.lit(`"`), body, c.b.lit(`"`)), nil
}

// format enforces the string formats whose syntax a grammar can hold.
func (c *schemaCompiler) format(f any, ptr string) (seq, error) {
	name, _ := f.(string)
	b := c.b
	var digit, hex byteSet
	digit.addRange('0', '9')
	hex.addRange('0', '9')
	hex.addRange('a', 'f')
	hex.addRange('A', 'F')
	d := b.set(digit)
	h := b.set(hex)
	n := func(x seq, k int) seq {
		var out seq
		for range k {
			out = append(out, x...)
		}
		return out
	}
	date := cat(n(d, 4), b.lit("-"), n(d, 2), b.lit("-"), n(d, 2))
	frac, err := b.rep(d, 1, 9)
	if err != nil {
		return nil, err
	}
	fracOpt, err := b.opt(cat(b.lit("."), frac))
	if err != nil {
		return nil, err
	}
	var sign byteSet
	sign.add('+')
	sign.add('-')
	zone, err := b.alt(b.lit("Z"), cat(b.set(sign), n(d, 2), b.lit(":"), n(d, 2)))
	if err != nil {
		return nil, err
	}
	tm := cat(n(d, 2), b.lit(":"), n(d, 2), b.lit(":"), n(d, 2), fracOpt, zone)
	var body seq
	switch name {
	case "date":
		body = date
	case "time":
		body = tm
	case "date-time":
		body = cat(date, b.lit("T"), tm)
	case "uuid":
		body = cat(n(h, 8), b.lit("-"), n(h, 4), b.lit("-"), n(h, 4), b.lit("-"), n(h, 4), b.lit("-"), n(h, 12))
	default:
		return nil, c.fail(ptr, "string format %v is not supported (supported: date, time, date-time, uuid)", f)
	}
	return cat(b.lit(`"`), body, b.lit(`"`)), nil
}

// integer is a JSON integer of at most maxIntDigits digits.
func (c *schemaCompiler) integer() (seq, error) {
	if c.intRule != nil {
		return c.intRule, nil
	}
	b := c.b
	var nz, digit byteSet
	nz.addRange('1', '9')
	digit.addRange('0', '9')
	rest, err := b.rep(b.set(digit), 0, maxIntDigits-1)
	if err != nil {
		return nil, err
	}
	minus, err := b.opt(b.lit("-"))
	if err != nil {
		return nil, err
	}
	r, err := b.alt(cat(minus, b.alt2(b.lit("0"), cat(b.set(nz), rest))))
	c.intRule = r
	return r, err
}

// number is a JSON number with bounded digits.
func (c *schemaCompiler) number() (seq, error) {
	if c.numRule != nil {
		return c.numRule, nil
	}
	b := c.b
	in, err := c.integer()
	if err != nil {
		return nil, err
	}
	var digit, e, sign byteSet
	digit.addRange('0', '9')
	e.add('e')
	e.add('E')
	sign.add('+')
	sign.add('-')
	frac, err := b.rep(b.set(digit), 1, maxFracDigits)
	if err != nil {
		return nil, err
	}
	exp, err := b.rep(b.set(digit), 1, maxExpDigits)
	if err != nil {
		return nil, err
	}
	signOpt, err := b.opt(b.set(sign))
	if err != nil {
		return nil, err
	}
	r, err := b.alt(cat(in, b.alt2(nil, cat(b.lit("."), frac)), b.alt2(nil, cat(b.set(e), signOpt, exp))))
	c.numRule = r
	return r, err
}

// anyValue is any JSON value.
func (c *schemaCompiler) anyValue() (seq, error) {
	if c.anyRule != nil {
		return c.anyRule, nil
	}
	r, err := c.b.newRule()
	if err != nil {
		return nil, err
	}
	c.anyRule = ref(r)
	str, err := c.anyString()
	if err != nil {
		return nil, err
	}
	num, err := c.number()
	if err != nil {
		return nil, err
	}
	obj, err := c.mapOf(c.anyRule)
	if err != nil {
		return nil, err
	}
	arr, err := c.listOf(c.anyRule, 0, -1)
	if err != nil {
		return nil, err
	}
	c.b.define(r, obj, arr, str, num, c.b.lit("true"), c.b.lit("false"), c.b.lit("null"))
	return c.anyRule, nil
}

// mapOf is an object whose keys are any strings and values val.
func (c *schemaCompiler) mapOf(val seq) (seq, error) {
	ws, err := c.ws()
	if err != nil {
		return nil, err
	}
	key, err := c.anyString()
	if err != nil {
		return nil, err
	}
	kv := cat(key, ws, c.b.lit(":"), ws, val, ws)
	more, err := c.b.star(cat(c.b.lit(","), ws, kv))
	if err != nil {
		return nil, err
	}
	body, err := c.b.opt(cat(kv, more))
	if err != nil {
		return nil, err
	}
	return cat(c.b.lit("{"), ws, body, c.b.lit("}")), nil
}

// listOf is an array of min to max (< 0: any number of) items.
func (c *schemaCompiler) listOf(item seq, min, max int) (seq, error) {
	ws, err := c.ws()
	if err != nil {
		return nil, err
	}
	it := cat(item, ws)
	if max == 0 {
		return cat(c.b.lit("["), ws, c.b.lit("]")), nil
	}
	restMax := -1
	if max > 0 {
		restMax = max - 1
	}
	rest, err := c.b.rep(cat(c.b.lit(","), ws, it), max0(min-1), restMax)
	if err != nil {
		return nil, err
	}
	body := cat(it, rest)
	if min == 0 {
		if body, err = c.b.opt(body); err != nil {
			return nil, err
		}
	}
	return cat(c.b.lit("["), ws, body, c.b.lit("]")), nil
}

func max0(x int) int { return max(x, 0) }

func (c *schemaCompiler) array(s *object, ptr string) (seq, error) {
	min, max, err := c.bounds(s, "minItems", "maxItems", ptr)
	if err != nil {
		return nil, err
	}
	item, err := c.anyValue()
	if v, ok := s.get("items"); ok {
		item, err = c.compile(v, ptr+"/items")
	}
	if err != nil {
		return nil, err
	}
	return c.listOf(item, min, max)
}

// object generates the properties in the schema's order; the required
// ones always, the others optionally. Other keys only where no
// properties are listed (a map).
func (c *schemaCompiler) object(s *object, ptr string) (seq, error) {
	props, _ := s.get("properties")
	addl, hasAddl := s.get("additionalProperties")
	po, isObj := props.(*object)
	if props != nil && !isObj {
		return nil, c.fail(ptr+"/properties", "want an object")
	}
	if po != nil && len(po.keys) == 0 && !hasAddl {
		// properties: {} lists no keys, and other keys are not
		// generated beside listed ones: the empty object (a tool without
		// arguments).
		ws, err := c.ws()
		return cat(c.b.lit("{"), ws, c.b.lit("}")), err
	}
	if po == nil || len(po.keys) == 0 {
		val, err := c.anyValue()
		if hasAddl {
			if b, ok := addl.(bool); ok && !b {
				ws, err := c.ws()
				return cat(c.b.lit("{"), ws, c.b.lit("}")), err
			}
			val, err = c.compile(addl, ptr+"/additionalProperties")
		}
		if err != nil {
			return nil, err
		}
		return c.mapOf(val)
	}
	if b, ok := addl.(bool); hasAddl && (!ok || b) {
		return nil, c.fail(ptr+"/additionalProperties", "other keys beside listed properties are not supported: set it to false or leave it out")
	}
	required := map[string]bool{}
	if r, ok := s.get("required"); ok {
		rs, isArr := r.([]any)
		if !isArr {
			return nil, c.fail(ptr+"/required", "want an array of property names")
		}
		for i, x := range rs {
			name, ok := x.(string)
			if _, listed := po.vals[name]; !ok || !listed {
				return nil, c.fail(ptr+"/required/"+strconv.Itoa(i), "%v is not one of the properties", x)
			}
			required[name] = true
		}
	}
	ws, err := c.ws()
	if err != nil {
		return nil, err
	}
	kvs := make([]seq, len(po.keys))
	for i, k := range po.keys {
		v, err := c.compile(po.vals[k], ptr+"/properties/"+escapePointer(k))
		if err != nil {
			return nil, err
		}
		kvs[i] = cat(c.literal(k), ws, c.b.lit(":"), ws, v, ws)
	}
	// first(i): properties i.. with none written yet; after(i): with
	// some written, so each starts with a comma.
	comma := cat(c.b.lit(","), ws)
	var first, after seq // for i = len: nothing
	for i := len(po.keys) - 1; i >= 0; i-- {
		var nf, na seq
		if required[po.keys[i]] {
			na = cat(comma, kvs[i], after)
			nf = cat(kvs[i], after)
		} else {
			if na, err = c.b.alt(cat(comma, kvs[i], after), after); err != nil {
				return nil, err
			}
			if nf, err = c.b.alt(cat(kvs[i], after), first); err != nil {
				return nil, err
			}
		}
		// Name them as rules so that each is built once.
		if after, err = c.b.alt(na); err != nil {
			return nil, err
		}
		if first, err = c.b.alt(nf); err != nil {
			return nil, err
		}
	}
	return cat(c.b.lit("{"), ws, first, c.b.lit("}")), nil
}
