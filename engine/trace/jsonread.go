package trace

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// decoder is a small streaming JSON reader, enough for Chrome traces: it
// reads through a fixed buffer and hands out strings and numbers as byte
// slices that stay valid until the next call. It holds no document tree, so
// a file of a million events is read in constant memory besides the result.
type decoder struct {
	r    io.Reader
	buf  []byte
	i, n int   // unread bytes are buf[i:n]
	off  int64 // stream offset of buf[0]
	rerr error // first error from r (io.EOF at the end)

	depth, maxDepth int
	maxString       int
	sc              []byte // scratch: strings with escapes or across refills, numbers across refills
	fix             []byte // scratch: strings repaired to valid UTF-8
	key             []byte // the current object key, copied out of buf
}

// errEOF is an unexpected end of input inside a value.
var errEOF = fmt.Errorf("%w: unexpected end of input", ErrMalformed)

func newDecoder(r io.Reader, maxDepth, maxString int) *decoder {
	return &decoder{r: r, buf: make([]byte, 64<<10), maxDepth: maxDepth, maxString: maxString}
}

func (d *decoder) tooLong() error {
	return fmt.Errorf("%w: a string longer than %d bytes at byte %d", ErrLimit, d.maxString, d.off+int64(d.i))
}

// fill reads more input into an exhausted buffer; false at the end of input.
func (d *decoder) fill() bool {
	if d.rerr != nil {
		return false
	}
	d.off += int64(d.n)
	d.i, d.n = 0, 0
	for tries := 0; d.n == 0; tries++ {
		if tries == 100 {
			d.rerr = io.ErrNoProgress
			return false
		}
		m, err := d.r.Read(d.buf)
		if m < 0 || m > len(d.buf) {
			d.rerr = errors.New("trace: reader returned an invalid count")
			return false
		}
		d.n = m
		if err != nil {
			d.rerr = err
			break
		}
	}
	return d.n > 0
}

// readErr is the error for input that ended early: the reader's own error, or
// errEOF at a clean end of file.
func (d *decoder) readErr() error {
	if d.rerr != nil && d.rerr != io.EOF {
		return d.rerr
	}
	return errEOF
}

func (d *decoder) syntax(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrMalformed, what, d.off+int64(d.i))
}

// peek skips white space and returns the next byte without consuming it;
// false at the end of input.
func (d *decoder) peek() (byte, bool) {
	for {
		for d.i < d.n {
			c := d.buf[d.i]
			if c == ' ' || c == '\n' || c == '\r' || c == '\t' {
				d.i++
				continue
			}
			return c, true
		}
		if !d.fill() {
			return 0, false
		}
	}
}

// expect consumes byte c after white space.
func (d *decoder) expect(c byte) error {
	got, ok := d.peek()
	if !ok {
		return d.readErr()
	}
	if got != c {
		return d.syntax(fmt.Sprintf("want %q, have %q", c, got))
	}
	d.i++
	return nil
}

// enter consumes the opening byte of an object or array.
func (d *decoder) enter(open byte) error {
	if err := d.expect(open); err != nil {
		return err
	}
	d.depth++
	if d.depth > d.maxDepth {
		return fmt.Errorf("%w: nesting deeper than %d", ErrLimit, d.maxDepth)
	}
	return nil
}

// more is the loop condition of an object or array whose opening byte enter
// consumed: it consumes the ',' before every member but the first, or the
// closing byte (then it returns false).
func (d *decoder) more(close byte, first bool) (bool, error) {
	c, ok := d.peek()
	if !ok {
		return false, d.readErr()
	}
	if c == close {
		d.i++
		d.depth--
		return false, nil
	}
	if !first {
		if c != ',' {
			return false, d.syntax(fmt.Sprintf("want ',' or %q, have %q", close, c))
		}
		d.i++
	}
	return true, nil
}

// members reads an object, calling member after each key has been read
// into d.key; member must consume the value. (The hot loops over events
// and their args are written out instead, so no closure is made per event.)
func (d *decoder) members(member func() error) error {
	if err := d.enter('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		more, err := d.more('}', first)
		if err != nil || !more {
			return err
		}
		if err := d.readKey(); err != nil {
			return err
		}
		if err := member(); err != nil {
			return err
		}
	}
}

// elems reads an array, calling elem for each element.
func (d *decoder) elems(elem func() error) error {
	if err := d.enter('['); err != nil {
		return err
	}
	for first := true; ; first = false {
		more, err := d.more(']', first)
		if err != nil || !more {
			return err
		}
		if err := elem(); err != nil {
			return err
		}
	}
}

// valueIf reads the next value with read when it starts with open ('{' or
// '['), and skips it otherwise: a field of an unexpected type is ignored,
// as the loader tolerates foreign files.
func (d *decoder) valueIf(open byte, read func() error) error {
	if c, _ := d.peek(); c == open {
		return read()
	}
	return d.skip()
}

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

// ensure makes at least n unread bytes contiguous in buf if the input has
// them, moving the unread tail to the front of buf.
func (d *decoder) ensure(n int) bool {
	for tries := 0; d.n-d.i < n; tries++ {
		if tries == 100 {
			d.rerr = io.ErrNoProgress
		}
		if d.rerr != nil {
			return false
		}
		m := copy(d.buf, d.buf[d.i:d.n])
		d.off += int64(d.i)
		d.i, d.n = 0, m
		k, err := d.r.Read(d.buf[m:])
		if k < 0 || k > len(d.buf)-m {
			d.rerr = errors.New("trace: reader returned an invalid count")
			return false
		}
		d.n += k
		if err != nil {
			d.rerr = err
		}
	}
	return true
}

// next consumes one byte.
func (d *decoder) next() (byte, bool) {
	if d.i == d.n && !d.fill() {
		return 0, false
	}
	c := d.buf[d.i]
	d.i++
	return c, true
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

// readLiteral consumes true, false or null.
func (d *decoder) readLiteral() (byte, error) {
	c, ok := d.peek()
	if !ok {
		return 0, d.readErr()
	}
	var want string
	switch c {
	case 't':
		want = "true"
	case 'f':
		want = "false"
	case 'n':
		want = "null"
	default:
		return 0, d.syntax(fmt.Sprintf("unexpected %q", c))
	}
	for k := 0; k < len(want); k++ {
		got, ok := d.next()
		if !ok {
			return 0, d.readErr()
		}
		if got != want[k] {
			return 0, d.syntax("invalid literal")
		}
	}
	return c, nil
}

// skip consumes one value of any kind.
func (d *decoder) skip() error {
	c, ok := d.peek()
	if !ok {
		return d.readErr()
	}
	switch {
	case c == '{':
		if err := d.enter('{'); err != nil {
			return err
		}
		for first := true; ; first = false {
			more, err := d.more('}', first)
			if err != nil || !more {
				return err
			}
			if _, err := d.readString(); err != nil {
				return err
			}
			if err := d.expect(':'); err != nil {
				return err
			}
			if err := d.skip(); err != nil {
				return err
			}
		}
	case c == '[':
		return d.elems(d.skip)
	case c == '"':
		_, err := d.readString()
		return err
	case c == '-' || '0' <= c && c <= '9':
		_, err := d.readNumber()
		return err
	default:
		_, err := d.readLiteral()
		return err
	}
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
