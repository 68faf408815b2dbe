// Package safetensors reads the safetensors format: an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the data. Orrery's training script (models/kjv) writes it,
// and `orrery convert` turns it into GGUF.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// MaxHeader bounds the JSON header (the format's own limit is 100 MB).
const MaxHeader = 100 << 20

// File is a parsed header: the free-form metadata and the tensors in the
// order of their data.
type File struct {
	Metadata map[string]string
	Tensors  []Tensor
	r        io.ReaderAt
	data     int64 // where the data section starts
}

// Tensor is one tensor's entry. Shape is row-major: the last dimension
// varies fastest (ggml's ne[0]).
type Tensor struct {
	Name       string
	DType      string
	Shape      []int64
	Begin, End int64 // byte range within the data section
}

// elemSize are the dtypes Floats reads.
var elemSize = map[string]int64{"F32": 4, "F16": 2, "BF16": 2}

// Parse reads and checks the header of a file of size bytes: every entry
// must have a known dtype, a byte range inside the file whose length is
// its shape's, and no two ranges may overlap.
func Parse(r io.ReaderAt, size int64) (*File, error) {
	var n [8]byte
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %d bytes, shorter than the 8-byte header length", size)
	}
	if _, err := r.ReadAt(n[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: header length: %w", err)
	}
	hl := binary.LittleEndian.Uint64(n[:])
	if hl > MaxHeader || hl > uint64(size-8) {
		return nil, fmt.Errorf("safetensors: header of %d bytes: the file has %d after the length, and the limit is %d", hl, size-8, MaxHeader)
	}
	hdr := make([]byte, hl)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("safetensors: header JSON: %w", err)
	}
	f := &File{r: r, data: 8 + int64(hl)}
	dataLen := size - f.data
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &f.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__: want an object of strings: %w", err)
			}
			continue
		}
		t, err := entry(name, v, dataLen)
		if err != nil {
			return nil, err
		}
		f.Tensors = append(f.Tensors, t)
	}
	slices.SortFunc(f.Tensors, func(a, b Tensor) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), cmp.Compare(a.Name, b.Name))
	})
	// Empty tensors hold no bytes: they overlap nothing.
	var last *Tensor
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.End == t.Begin {
			continue
		}
		if last != nil && last.End > t.Begin {
			return nil, fmt.Errorf("safetensors: tensors %q and %q overlap", last.Name, t.Name)
		}
		last = t
	}
	return f, nil
}

func entry(name string, v json.RawMessage, dataLen int64) (Tensor, error) {
	var e struct {
		DType   string  `json:"dtype"`
		Shape   []int64 `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	es, ok := elemSize[e.DType]
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: dtype %q: want F32, F16 or BF16", name, e.DType)
	}
	if len(e.Offsets) != 2 || e.Offsets[0] < 0 || e.Offsets[0] > e.Offsets[1] || e.Offsets[1] > dataLen {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: data_offsets %v: want [begin, end] within the %d data bytes", name, e.Offsets, dataLen)
	}
	if len(e.Shape) > 8 {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: %d dimensions: at most 8", name, len(e.Shape))
	}
	elems := int64(1)
	for _, d := range e.Shape {
		if d < 0 || d > dataLen || elems*d > dataLen {
			return Tensor{}, fmt.Errorf("safetensors: tensor %q: shape %v does not fit the %d data bytes", name, e.Shape, dataLen)
		}
		elems *= d
	}
	if got := e.Offsets[1] - e.Offsets[0]; got != elems*es {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: %d bytes for shape %v of %s (want %d)", name, got, e.Shape, e.DType, elems*es)
	}
	return Tensor{Name: name, DType: e.DType, Shape: e.Shape, Begin: e.Offsets[0], End: e.Offsets[1]}, nil
}

// Tensor returns the entry named name.
func (f *File) Tensor(name string) (Tensor, bool) {
	i := slices.IndexFunc(f.Tensors, func(t Tensor) bool { return t.Name == name })
	if i < 0 {
		return Tensor{}, false
	}
	return f.Tensors[i], true
}

// Floats reads t's values as float32.
func (f *File) Floats(t Tensor) ([]float32, error) {
	b := make([]byte, t.End-t.Begin)
	if _, err := f.r.ReadAt(b, f.data+t.Begin); err != nil {
		return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	es := elemSize[t.DType]
	out := make([]float32, int64(len(b))/es)
	for i := range out {
		switch t.DType {
		case "F32":
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case "F16":
			out[i] = gguf.F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		case "BF16":
			out[i] = gguf.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		default:
			return nil, errors.New("safetensors: unreachable dtype")
		}
	}
	return out, nil
}
