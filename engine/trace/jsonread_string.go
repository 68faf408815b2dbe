package trace

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Strings: object keys and string values, with their escapes and surrogate
// pairs decoded and invalid UTF-8 replaced by U+FFFD.

// readKey reads an object key and its ':' into d.key.
func (d *decoder) readKey() error {
	s, err := d.readString()
	if err != nil {
		return err
	}
	d.key = append(d.key[:0], s...)
	return d.expect(':')
}

// readString reads a string value (after white space) and returns its
// unescaped bytes, valid UTF-8 (invalid bytes become U+FFFD). The slice is
// valid until the next call on d.
func (d *decoder) readString() ([]byte, error) {
	if err := d.expect('"'); err != nil {
		return nil, err
	}
	start := d.i
	high := false
	for j := start; j < d.n; j++ {
		c := d.buf[j]
		if c == '"' {
			s := d.buf[start:j]
			if len(s) > d.maxString {
				return nil, d.tooLong()
			}
			d.i = j + 1
			if high && !utf8.Valid(s) {
				return d.repair(s), nil
			}
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		if c >= utf8.RuneSelf {
			high = true
		}
	}
	return d.readStringSlow(start)
}

// readStringSlow finishes a string that has escapes or crosses a refill. The
// string's content starts at buf[start].
func (d *decoder) readStringSlow(start int) ([]byte, error) {
	sc := d.sc[:0]
	j := start
	for {
		// Copy the plain run, then deal with the byte that ended it.
		k := j
		for k < d.n {
			c := d.buf[k]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			k++
		}
		sc = append(sc, d.buf[j:k]...)
		d.i = k
		if len(sc) > d.maxString {
			d.sc = sc
			return nil, d.tooLong()
		}
		if k == d.n {
			if !d.fill() {
				d.sc = sc
				return nil, d.readErr()
			}
			j = d.i
			continue
		}
		c := d.buf[k]
		d.i = k + 1
		switch {
		case c == '"':
			d.sc = sc
			if !utf8.Valid(sc) {
				return d.repair(sc), nil
			}
			return sc, nil
		case c < 0x20:
			d.sc = sc
			return nil, d.syntax("control character in string")
		}
		// An escape.
		e, ok := d.next()
		if !ok {
			d.sc = sc
			return nil, d.readErr()
		}
		switch e {
		case '"', '\\', '/':
			sc = append(sc, e)
		case 'b':
			sc = append(sc, '\b')
		case 'f':
			sc = append(sc, '\f')
		case 'n':
			sc = append(sc, '\n')
		case 'r':
			sc = append(sc, '\r')
		case 't':
			sc = append(sc, '\t')
		case 'u':
			r, err := d.hex4()
			if err != nil {
				d.sc = sc
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				r = d.lowSurrogate(r)
			}
			sc = utf8.AppendRune(sc, r)
		default:
			d.sc = sc
			return nil, d.syntax("invalid escape in string")
		}
		j = d.i
	}
}

// lowSurrogate completes the high surrogate r with a following \uXXXX low
// surrogate if there is one; a lone surrogate becomes U+FFFD, as in
// encoding/json.
func (d *decoder) lowSurrogate(r rune) rune {
	if r >= 0xdc00 { // a low surrogate first
		return utf8.RuneError
	}
	// Look ahead for `\u` without consuming anything else.
	if !d.ensure(6) || d.buf[d.i] != '\\' || d.buf[d.i+1] != 'u' {
		return utf8.RuneError
	}
	save := d.i
	d.i += 2
	r2, err := d.hex4()
	if err != nil || r2 < 0xdc00 || r2 > 0xdfff {
		d.i = save // leave it to be read as its own escape
		return utf8.RuneError
	}
	return utf16.DecodeRune(r, r2)
}

func (d *decoder) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, ok := d.next()
		if !ok {
			return 0, d.readErr()
		}
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, d.syntax("invalid \\u escape")
		}
		r = r<<4 | rune(c)
	}
	return r, nil
}

// repair returns s with every invalid UTF-8 byte replaced by U+FFFD.
func (d *decoder) repair(s []byte) []byte {
	f := d.fix[:0]
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 {
			f = append(f, "\ufffd"...)
		} else {
			f = append(f, s[:size]...)
		}
		s = s[size:]
	}
	d.fix = f
	return f
}
