package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// Limits bound what Read accepts, so that a malformed or hostile file
// cannot make it allocate without end. The zero value means the defaults.
type Limits struct {
	MaxKV        uint64 // metadata entries (default 1 << 16)
	MaxTensors   uint64 // tensors (default 1 << 20)
	MaxString    uint64 // bytes in one string (default 1 << 20)
	MaxArray     uint64 // elements in one array (default 1 << 24)
	MaxMetaBytes uint64 // bytes of all metadata and directory (default 512 MiB)
}

func (l Limits) withDefaults() Limits {
	if l.MaxKV == 0 {
		l.MaxKV = 1 << 16
	}
	if l.MaxTensors == 0 {
		l.MaxTensors = 1 << 20
	}
	if l.MaxString == 0 {
		l.MaxString = 1 << 20
	}
	if l.MaxArray == 0 {
		l.MaxArray = 1 << 24
	}
	if l.MaxMetaBytes == 0 {
		l.MaxMetaBytes = 512 << 20
	}
	return l
}

// ReadFile reads the header of the GGUF file at path and checks that every
// tensor lies within the file.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	gf, err := Read(f, st.Size(), Limits{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return gf, nil
}

// Read reads a GGUF header from r. size is the whole file's size, used to
// check that tensor data lies within it (-1: unknown, not checked).
func Read(r io.Reader, size int64, lim Limits) (*File, error) {
	lim = lim.withDefaults()
	d := &decoder{r: bufio.NewReaderSize(r, 64<<10), lim: lim}
	magic := d.u32()
	if d.err == nil && magic != Magic {
		return nil, fmt.Errorf("not a GGUF file (magic %#x)", magic)
	}
	f := &File{Version: d.u32()}
	if d.err == nil && (f.Version < 2 || f.Version > 3) {
		return nil, fmt.Errorf("GGUF version %d, want 2 or 3", f.Version)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err != nil {
		return nil, fmt.Errorf("header: %w", d.err)
	}
	if nkv > lim.MaxKV {
		return nil, fmt.Errorf("%d metadata entries, limit %d", nkv, lim.MaxKV)
	}
	if nt > lim.MaxTensors {
		return nil, fmt.Errorf("%d tensors, limit %d", nt, lim.MaxTensors)
	}
	seen := map[string]bool{}
	for i := uint64(0); i < nkv; i++ {
		key := d.str()
		typ := ValueType(d.u32())
		v := d.value(typ, 0)
		if d.err != nil {
			return nil, fmt.Errorf("metadata entry %d (%q): %w", i, key, d.err)
		}
		if seen[key] {
			return nil, fmt.Errorf("metadata key %q twice", key)
		}
		seen[key] = true
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	f.Alignment = DefaultAlignment
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("general.alignment %v: want a power of two (uint32) up to 1 MiB", v)
		}
		f.Alignment = uint64(a)
	}
	names := map[string]bool{}
	for i := uint64(0); i < nt; i++ {
		t := TensorInfo{Name: d.str()}
		nd := d.u32()
		if d.err == nil && (nd == 0 || nd > 4) {
			return nil, fmt.Errorf("tensor %d (%q): %d dims, want 1..4", i, t.Name, nd)
		}
		elems := uint64(1)
		for j := uint32(0); j < nd && d.err == nil; j++ {
			n := d.u64()
			if n == 0 || n > 1<<40 || elems > math.MaxUint64/n {
				return nil, fmt.Errorf("tensor %d (%q): dim %d is %d", i, t.Name, j, n)
			}
			elems *= n
			t.Dims = append(t.Dims, n)
		}
		t.Type = TensorType(d.u32())
		t.Offset = d.u64()
		if d.err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, d.err)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("tensor %q twice", t.Name)
		}
		names[t.Name] = true
		if !t.Type.Known() {
			return nil, fmt.Errorf("tensor %q: unknown type %d", t.Name, uint32(t.Type))
		}
		sz, ok := t.Type.RowBytes(elems)
		if !ok || t.Dims[0]%tensorTypes[t.Type].blockElems != 0 {
			return nil, fmt.Errorf("tensor %q: %d elements do not fill %s blocks", t.Name, elems, t.Type)
		}
		if t.Offset%f.Alignment != 0 || t.Offset > math.MaxInt64-sz {
			return nil, fmt.Errorf("tensor %q: offset %d is not %d-aligned", t.Name, t.Offset, f.Alignment)
		}
		t.Size = sz
		f.Tensors = append(f.Tensors, t)
	}
	pad := (f.Alignment - d.n%f.Alignment) % f.Alignment
	f.DataOffset = int64(d.n + pad)
	if size >= 0 {
		for _, t := range f.Tensors {
			if end := uint64(f.DataOffset) + t.Offset + t.Size; end > uint64(size) {
				return nil, fmt.Errorf("tensor %q ends at byte %d, past the end of the file (%d bytes): truncated?", t.Name, end, size)
			}
		}
	}
	return f, nil
}

// decoder reads little-endian values, keeping the first error and the
// count of bytes read.
type decoder struct {
	r   *bufio.Reader
	lim Limits
	n   uint64
	buf [8]byte
	err error
}

func (d *decoder) read(n int) []byte {
	if d.err != nil {
		return d.buf[:n]
	}
	if _, err := io.ReadFull(d.r, d.buf[:n]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = err
	}
	d.n += uint64(n)
	d.account(0)
	return d.buf[:n]
}

// account adds n bytes to the count and checks the metadata bound.
func (d *decoder) account(n uint64) {
	d.n += n
	if d.err == nil && d.n > d.lim.MaxMetaBytes {
		d.err = fmt.Errorf("metadata over %d bytes", d.lim.MaxMetaBytes)
	}
}

func (d *decoder) u8() uint8   { return d.read(1)[0] }
func (d *decoder) u16() uint16 { return binary.LittleEndian.Uint16(d.read(2)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.read(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.read(8)) }

func (d *decoder) str() string {
	n := d.u64()
	if d.err != nil {
		return ""
	}
	if n > d.lim.MaxString {
		d.err = fmt.Errorf("string of %d bytes, limit %d", n, d.lim.MaxString)
		return ""
	}
	d.account(n)
	if d.err != nil {
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.err = io.ErrUnexpectedEOF
		return ""
	}
	return string(b)
}

func (d *decoder) value(t ValueType, depth int) any {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		b := d.u8()
		if d.err == nil && b > 1 {
			d.err = fmt.Errorf("bool byte %d", b)
		}
		return b == 1
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		if depth > 0 {
			d.err = errors.New("nested arrays are not supported")
			return nil
		}
		et := ValueType(d.u32())
		n := d.u64()
		if d.err != nil {
			return nil
		}
		if n > d.lim.MaxArray {
			d.err = fmt.Errorf("array of %d elements, limit %d", n, d.lim.MaxArray)
			return nil
		}
		return d.array(et, n)
	default:
		if d.err == nil {
			d.err = fmt.Errorf("unknown value type %d", uint32(t))
		}
		return nil
	}
}

// array reads n elements of type t into a typed slice. Slices grow as
// elements arrive, so a large n with a short file fails before it
// allocates much.
func (d *decoder) array(t ValueType, n uint64) any {
	switch t {
	case TypeString:
		return readArray(d, n, func() string { return d.str() })
	case TypeUint8:
		return readArray(d, n, d.u8)
	case TypeInt8:
		return readArray(d, n, func() int8 { return int8(d.u8()) })
	case TypeUint16:
		return readArray(d, n, d.u16)
	case TypeInt16:
		return readArray(d, n, func() int16 { return int16(d.u16()) })
	case TypeUint32:
		return readArray(d, n, d.u32)
	case TypeInt32:
		return readArray(d, n, func() int32 { return int32(d.u32()) })
	case TypeFloat32:
		return readArray(d, n, func() float32 { return math.Float32frombits(d.u32()) })
	case TypeBool:
		return readArray(d, n, func() bool { return d.value(TypeBool, 1).(bool) })
	case TypeUint64:
		return readArray(d, n, d.u64)
	case TypeInt64:
		return readArray(d, n, func() int64 { return int64(d.u64()) })
	case TypeFloat64:
		return readArray(d, n, func() float64 { return math.Float64frombits(d.u64()) })
	case TypeArray:
		d.err = errors.New("nested arrays are not supported")
	default:
		d.err = fmt.Errorf("unknown array element type %d", uint32(t))
	}
	return nil
}

func readArray[T any](d *decoder, n uint64, next func() T) []T {
	out := make([]T, 0, min(n, 4096))
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, next())
	}
	if d.err != nil {
		return nil
	}
	return out
}
