package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// WriteTensor is a tensor to write: its directory entry and a function
// that writes exactly its data (Type.RowBytes of its elements).
type WriteTensor struct {
	Name string
	Type TensorType
	Dims []uint64
	Data func(w io.Writer) error
}

// Write writes a GGUF v3 file: the metadata in order, the tensor directory,
// and each tensor's data aligned to DefaultAlignment (or general.alignment
// when kvs set it).
func Write(w io.Writer, kvs []KV, tensors []WriteTensor) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	e := &encoder{w: bw}
	e.u32(Magic)
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	align := uint64(DefaultAlignment)
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("general.alignment %v: want a power of two (uint32)", kv.Value)
			}
			align = uint64(a)
		}
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("metadata %q: %w", kv.Key, err)
		}
	}
	var off uint64
	sizes := make([]uint64, len(tensors))
	for i, t := range tensors {
		elems := uint64(1)
		for _, d := range t.Dims {
			elems *= d
		}
		sz, ok := t.Type.RowBytes(elems)
		if !ok || len(t.Dims) == 0 || len(t.Dims) > 4 {
			return fmt.Errorf("tensor %q: %v elements of %s", t.Name, t.Dims, t.Type)
		}
		sizes[i] = sz
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off += (sz + align - 1) / align * align
	}
	e.pad(align)
	for i, t := range tensors {
		cw := &countingWriter{w: bw}
		if err := t.Data(cw); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if cw.n != sizes[i] {
			return fmt.Errorf("tensor %q: wrote %d bytes, want %d", t.Name, cw.n, sizes[i])
		}
		e.n += cw.n
		e.pad(align)
	}
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

// WriteFile writes a GGUF file atomically (internal/atomicfile): readers
// and the model scanner never see half a model.
func WriteFile(path string, kvs []KV, tensors []WriteTensor) error {
	return atomicfile.WriteFunc(path, 0o600, func(w io.Writer) error { return Write(w, kvs, tensors) })
}

type countingWriter struct {
	w io.Writer
	n uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

type encoder struct {
	w   io.Writer
	n   uint64
	buf [8]byte
	err error
}

func (e *encoder) write(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:4], v); e.write(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:8], v); e.write(e.buf[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.write([]byte(s)) }

func (e *encoder) pad(align uint64) {
	if p := (align - e.n%align) % align; p > 0 {
		e.write(make([]byte, p))
	}
}

// value writes v's type tag and its encoding: a scalar, or an array of one
// element type.
func (e *encoder) value(v any) error {
	if e.scalar(v) || e.array(v) {
		return nil
	}
	return fmt.Errorf("unsupported value type %T", v)
}

// scalar writes v if it is a scalar type, reporting whether it was.
func (e *encoder) scalar(v any) bool {
	switch x := v.(type) {
	case uint8:
		e.u32(uint32(TypeUint8))
		e.write([]byte{x})
	case int8:
		e.u32(uint32(TypeInt8))
		e.write([]byte{byte(x)})
	case uint16:
		e.u32(uint32(TypeUint16))
		binary.LittleEndian.PutUint16(e.buf[:2], x)
		e.write(e.buf[:2])
	case int16:
		e.u32(uint32(TypeInt16))
		binary.LittleEndian.PutUint16(e.buf[:2], uint16(x))
		e.write(e.buf[:2])
	case uint32:
		e.u32(uint32(TypeUint32))
		e.u32(x)
	case int32:
		e.u32(uint32(TypeInt32))
		e.u32(uint32(x))
	case float32:
		e.u32(uint32(TypeFloat32))
		e.u32(math.Float32bits(x))
	case bool:
		e.u32(uint32(TypeBool))
		b := byte(0)
		if x {
			b = 1
		}
		e.write([]byte{b})
	case string:
		e.u32(uint32(TypeString))
		e.str(x)
	case uint64:
		e.u32(uint32(TypeUint64))
		e.u64(x)
	case int64:
		e.u32(uint32(TypeInt64))
		e.u64(uint64(x))
	case float64:
		e.u32(uint32(TypeFloat64))
		e.u64(math.Float64bits(x))
	default:
		return false
	}
	return true
}

// array writes v if it is a slice of a scalar type, reporting whether it was.
func (e *encoder) array(v any) bool {
	switch x := v.(type) {
	case []string:
		e.arrayHeader(TypeString, len(x))
		for _, s := range x {
			e.str(s)
		}
	case []float32:
		e.arrayHeader(TypeFloat32, len(x))
		for _, f := range x {
			e.u32(math.Float32bits(f))
		}
	case []int32:
		e.arrayHeader(TypeInt32, len(x))
		for _, i := range x {
			e.u32(uint32(i))
		}
	case []uint32:
		e.arrayHeader(TypeUint32, len(x))
		for _, i := range x {
			e.u32(i)
		}
	case []uint64:
		e.arrayHeader(TypeUint64, len(x))
		for _, i := range x {
			e.u64(i)
		}
	case []int64:
		e.arrayHeader(TypeInt64, len(x))
		for _, i := range x {
			e.u64(uint64(i))
		}
	case []float64:
		e.arrayHeader(TypeFloat64, len(x))
		for _, f := range x {
			e.u64(math.Float64bits(f))
		}
	case []bool:
		e.arrayHeader(TypeBool, len(x))
		for _, b := range x {
			if b {
				e.write([]byte{1})
			} else {
				e.write([]byte{0})
			}
		}
	case []uint8:
		e.arrayHeader(TypeUint8, len(x))
		e.write(x)
	case []int8:
		e.arrayHeader(TypeInt8, len(x))
		for _, i := range x {
			e.write([]byte{byte(i)})
		}
	case []uint16:
		e.arrayHeader(TypeUint16, len(x))
		for _, i := range x {
			binary.LittleEndian.PutUint16(e.buf[:2], i)
			e.write(e.buf[:2])
		}
	case []int16:
		e.arrayHeader(TypeInt16, len(x))
		for _, i := range x {
			binary.LittleEndian.PutUint16(e.buf[:2], uint16(i))
			e.write(e.buf[:2])
		}
	default:
		return false
	}
	return true
}

func (e *encoder) arrayHeader(t ValueType, n int) {
	e.u32(uint32(TypeArray))
	e.u32(uint32(t))
	e.u64(uint64(n))
}
