package trace

import (
	"errors"
	"fmt"
	"io"
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

// newDecoderBytes reads data in place (it is never written to), then
// reports end, io.EOF or the error that cut data short, as a stream would.
func newDecoderBytes(data []byte, end error, maxDepth, maxString int) *decoder {
	return &decoder{buf: data, n: len(data), rerr: end, maxDepth: maxDepth, maxString: maxString}
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
