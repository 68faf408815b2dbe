// Package gguf reads and writes GGUF model files (version 2 and 3): the
// metadata key/values and tensor directory, and tensor data by offset. It is
// pure Go, bounds every count and length it reads, and never trusts an
// offset or size from the file.
package gguf

import (
	"fmt"
	"slices"
)

// Magic is "GGUF" as a little-endian uint32.
const Magic = 0x46554747

// DefaultAlignment is the tensor data alignment when general.alignment is
// absent.
const DefaultAlignment = 32

// ValueType is a metadata value's type tag.
type ValueType uint32

const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

// TensorType is a ggml tensor type.
type TensorType uint32

// Tensor types with their numbers from ggml.h.
const (
	F32     TensorType = 0
	F16     TensorType = 1
	Q4_0    TensorType = 2
	Q4_1    TensorType = 3
	Q5_0    TensorType = 6
	Q5_1    TensorType = 7
	Q8_0    TensorType = 8
	Q8_1    TensorType = 9
	Q2_K    TensorType = 10
	Q3_K    TensorType = 11
	Q4_K    TensorType = 12
	Q5_K    TensorType = 13
	Q6_K    TensorType = 14
	Q8_K    TensorType = 15
	IQ2_XXS TensorType = 16
	IQ2_XS  TensorType = 17
	IQ3_XXS TensorType = 18
	IQ1_S   TensorType = 19
	IQ4_NL  TensorType = 20
	IQ3_S   TensorType = 21
	IQ2_S   TensorType = 22
	IQ4_XS  TensorType = 23
	I8      TensorType = 24
	I16     TensorType = 25
	I32     TensorType = 26
	I64     TensorType = 27
	F64     TensorType = 28
	IQ1_M   TensorType = 29
	BF16    TensorType = 30
	TQ1_0   TensorType = 34
	TQ2_0   TensorType = 35
	MXFP4   TensorType = 39
)

type typeInfo struct {
	name       string
	blockElems uint64 // elements per block
	blockBytes uint64 // bytes per block
}

var tensorTypes = map[TensorType]typeInfo{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2}, F64: {"F64", 1, 8},
	I8: {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 36}, IQ4_NL: {"IQ4_NL", 32, 18}, MXFP4: {"MXFP4", 32, 17},
	Q2_K: {"Q2_K", 256, 84}, Q3_K: {"Q3_K", 256, 110}, Q4_K: {"Q4_K", 256, 144}, Q5_K: {"Q5_K", 256, 176},
	Q6_K: {"Q6_K", 256, 210}, Q8_K: {"Q8_K", 256, 292}, IQ2_XXS: {"IQ2_XXS", 256, 66}, IQ2_XS: {"IQ2_XS", 256, 74},
	IQ3_XXS: {"IQ3_XXS", 256, 98}, IQ1_S: {"IQ1_S", 256, 50}, IQ3_S: {"IQ3_S", 256, 110}, IQ2_S: {"IQ2_S", 256, 82},
	IQ4_XS: {"IQ4_XS", 256, 136}, IQ1_M: {"IQ1_M", 256, 56}, TQ1_0: {"TQ1_0", 256, 54}, TQ2_0: {"TQ2_0", 256, 66},
}

func (t TensorType) String() string {
	if ti, ok := tensorTypes[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type-%d", uint32(t))
}

// Known reports whether the type's block layout is known.
func (t TensorType) Known() bool { _, ok := tensorTypes[t]; return ok }

// RowBytes is the size of n elements of type t; ok is false when n is not a
// whole number of blocks or t is unknown.
func (t TensorType) RowBytes(n uint64) (uint64, bool) {
	ti, ok := tensorTypes[t]
	if !ok || n%ti.blockElems != 0 {
		return 0, false
	}
	return n / ti.blockElems * ti.blockBytes, true
}

// TensorInfo is one tensor's entry in the directory.
type TensorInfo struct {
	Name string
	// Dims are ggml dims: Dims[0] is the innermost (contiguous) one.
	Dims []uint64
	Type TensorType
	// Offset is relative to the start of the data section.
	Offset uint64
	// Size is the data's size in bytes, from the type and dims.
	Size uint64
}

// Elements is the number of elements.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// KV is one metadata entry. Value holds uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64 or float64, or for arrays a
// slice of one of those.
type KV struct {
	Key   string
	Value any
}

// File is a GGUF file's header: metadata and tensor directory.
type File struct {
	Version   uint32
	KV        []KV
	Tensors   []TensorInfo
	Alignment uint64
	// DataOffset is where the data section starts in the file.
	DataOffset int64

	index map[string]int // key → KV index
}

// Get returns a metadata value.
func (f *File) Get(key string) (any, bool) {
	if f.index == nil {
		f.index = make(map[string]int, len(f.KV))
		for i, kv := range f.KV {
			f.index[kv.Key] = i
		}
	}
	i, ok := f.index[key]
	if !ok {
		return nil, false
	}
	return f.KV[i].Value, true
}

// With returns a copy of f with key set to v: replaced where f has it,
// appended where not. f is left as it is (tests derive variants of one
// generated model's directory with it).
func (f *File) With(key string, v any) *File {
	g := *f
	g.index = nil
	g.KV = slices.Clone(f.KV)
	if i := slices.IndexFunc(g.KV, func(kv KV) bool { return kv.Key == key }); i >= 0 {
		g.KV[i].Value = v
	} else {
		g.KV = append(g.KV, KV{Key: key, Value: v})
	}
	return &g
}

// String returns a string value, or def.
func (f *File) String(key, def string) string {
	if v, ok := f.Get(key); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return def
}

// Uint returns an integer value (any integer type that fits), or def.
func (f *File) Uint(key string, def uint64) uint64 {
	v, ok := f.Get(key)
	if !ok {
		return def
	}
	switch x := v.(type) {
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case int8:
		if x >= 0 {
			return uint64(x)
		}
	case int16:
		if x >= 0 {
			return uint64(x)
		}
	case int32:
		if x >= 0 {
			return uint64(x)
		}
	case int64:
		if x >= 0 {
			return uint64(x)
		}
	}
	return def
}

// Float returns a float value (float32 or float64), or def.
func (f *File) Float(key string, def float64) float64 {
	v, ok := f.Get(key)
	if !ok {
		return def
	}
	switch x := v.(type) {
	case float32:
		return float64(x)
	case float64:
		return x
	}
	return def
}

// Bool returns a bool value, or def.
func (f *File) Bool(key string, def bool) bool {
	if v, ok := f.Get(key); ok {
		if b, ok := v.(bool); ok {
			return b
		}
	}
	return def
}

// Strings returns a string array, or nil.
func (f *File) Strings(key string) []string {
	if v, ok := f.Get(key); ok {
		if s, ok := v.([]string); ok {
			return s
		}
	}
	return nil
}

// Tensor returns the named tensor's entry.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i], true
		}
	}
	return nil, false
}

// DataSize is the size of the data section (end of the last tensor).
func (f *File) DataSize() uint64 {
	var end uint64
	for _, t := range f.Tensors {
		end = max(end, t.Offset+t.Size)
	}
	return end
}
