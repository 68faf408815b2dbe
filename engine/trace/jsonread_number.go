package trace

import (
	"errors"
	"io"
	"strconv"
)

// Numbers and scalars: JSON numbers checked against the grammar, and their
// exact conversion to fixed-point integers and to floats.

// readNumber reads a JSON number and returns its text, checked against the
// JSON grammar. The slice is valid until the next call on d.
func (d *decoder) readNumber() ([]byte, error) {
	if _, ok := d.peek(); !ok {
		return nil, d.readErr()
	}
	start := d.i
	j := start
	for j < d.n && isNumByte(d.buf[j]) {
		j++
	}
	var s []byte
	if j < d.n {
		s = d.buf[start:j]
		d.i = j
	} else {
		sc := append(d.sc[:0], d.buf[start:j]...)
		d.i = j
		for {
			c, ok := d.next()
			if !ok {
				break
			}
			if !isNumByte(c) {
				d.i--
				break
			}
			if len(sc) > 1024 {
				d.sc = sc
				return nil, d.syntax("number too long")
			}
			sc = append(sc, c)
		}
		d.sc = sc
		s = sc
		if d.rerr != nil && d.rerr != io.EOF {
			return nil, d.rerr
		}
	}
	if !validNumber(s) {
		return nil, d.syntax("invalid number")
	}
	return s, nil
}

func isNumByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// validNumber checks s against JSON's number grammar.
func validNumber(s []byte) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i == len(s) {
		return false
	}
	if s[i] == '0' {
		i++
	} else if '1' <= s[i] && s[i] <= '9' {
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(s)
}

// scalar is a loosely typed JSON value as exo's loader reads it: numbers,
// numeric strings and booleans count as numbers.
type scalar struct {
	kind byte   // 0 object or array, 'n' number, 's' string, 'b' bool, 'z' null
	text []byte // number or string text; valid until the next decoder call
	b    bool
}

// readScalar reads any value; objects and arrays are skipped and give kind 0.
func (d *decoder) readScalar() (scalar, error) {
	c, ok := d.peek()
	if !ok {
		return scalar{}, d.readErr()
	}
	switch {
	case c == '"':
		s, err := d.readString()
		return scalar{kind: 's', text: s}, err
	case c == '-' || '0' <= c && c <= '9':
		s, err := d.readNumber()
		return scalar{kind: 'n', text: s}, err
	case c == 't' || c == 'f':
		_, err := d.readLiteral()
		return scalar{kind: 'b', b: c == 't'}, err
	case c == 'n':
		_, err := d.readLiteral()
		return scalar{kind: 'z'}, err
	default:
		return scalar{}, d.skip()
	}
}

// fixedInt converts a number or numeric string to an integer count of
// 10^-scale units, truncated toward zero like Python's int() and saturated
// at the int64 range: scale 0 gives an integer, scale 3 turns µs into ns.
// Strings may carry surrounding white space (as int() allows); ok is false
// for anything that is not a number.
func (v scalar) fixedInt(scale int) (n int64, ok bool) {
	switch v.kind {
	case 'b':
		if v.b {
			return pow10(scale), true
		}
		return 0, true
	case 'n':
		return decimalToFixed(v.text, scale)
	case 's':
		s := trimSpace(v.text)
		if !validNumber(s) {
			return 0, false
		}
		return decimalToFixed(s, scale)
	}
	return 0, false
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

func trimSpace(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 {
		c := s[len(s)-1]
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// decimalToFixed converts a valid JSON number to an integer in units of
// 10^-scale, exactly (no float rounding), truncating toward zero and
// saturating.
func decimalToFixed(s []byte, scale int) (int64, bool) {
	neg := false
	if len(s) > 0 && s[0] == '-' {
		neg = true
		s = s[1:]
	}
	if n, ok := plainFixed(s, scale); ok {
		if neg {
			return -n, true
		}
		return n, true
	}
	// Split into digits and the position of the decimal point.
	var digits [40]byte
	nd := 0    // significant digits kept (leading zeros dropped)
	point := 0 // digits before the decimal point, relative to digits[0]
	extra := 0 // digits dropped past the buffer, before the point
	i := 0
	sawPoint := false
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			sawPoint = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if nd == 0 && c == '0' {
			if sawPoint {
				point--
			}
			continue
		}
		if nd < len(digits) {
			digits[nd] = c
			nd++
			if !sawPoint {
				point++
			}
		} else if !sawPoint {
			extra++
		}
	}
	point += extra
	if i < len(s) { // exponent
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		e := 0
		for ; i < len(s); i++ {
			if e < 100000 {
				e = e*10 + int(s[i]-'0')
			}
		}
		if eneg {
			e = -e
		}
		point += e
	}
	point += scale
	// The integer part is digits[:point] followed by zeros.
	var u uint64
	const cutoff = (1<<63 - 1) / 10
	if nd > 0 && point > 19 {
		return saturate(neg), true
	}
	for k := 0; k < point && nd > 0; k++ {
		dv := uint64(0)
		if k < nd {
			dv = uint64(digits[k] - '0')
		}
		if u > cutoff || (u == cutoff && dv > 7) {
			return saturate(neg), true
		}
		u = u*10 + dv
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// plainFixed is decimalToFixed's fast path for the usual numbers: digits,
// optionally a fraction, no exponent, at most 19 digits (which fit a uint64)
// and a result that fits an int64.
func plainFixed(s []byte, scale int) (int64, bool) {
	var u uint64
	digits, frac := 0, -1 // frac: fraction digits taken, -1 before the point
	for _, c := range s {
		switch {
		case '0' <= c && c <= '9':
			if frac >= 0 {
				if frac == scale {
					continue // truncated
				}
				frac++
			}
			u = u*10 + uint64(c-'0')
			if digits++; digits > 19 {
				return 0, false
			}
		case c == '.' && frac < 0:
			frac = 0
		default:
			return 0, false
		}
	}
	for frac = max(frac, 0); frac < scale; frac++ {
		u *= 10
		if digits++; digits > 19 {
			return 0, false
		}
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

func saturate(neg bool) int64 {
	if neg {
		return -1 << 63
	}
	return 1<<63 - 1
}

// float converts a number or numeric string; non-finite results become 0.
func (v scalar) float() (float64, bool) {
	var s []byte
	switch v.kind {
	case 'b':
		if v.b {
			return 1, true
		}
		return 0, true
	case 'n':
		s = v.text
	case 's':
		s = trimSpace(v.text)
		if !validNumber(s) {
			return 0, false
		}
	default:
		return 0, false
	}
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if f-f != 0 { // ±Inf
		return 0, true
	}
	return f, true
}
