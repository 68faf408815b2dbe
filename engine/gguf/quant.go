package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Conversions for the types gen-model writes and the reference forward
// pass reads: F32, F16 and Q8_0.

// Float32ToF16 converts a float32 to IEEE half precision, rounding to nearest even.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // overflow
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		e := uint32(exp - 127 + 15)
		m := mant >> 13
		rest := mant & 0x1fff
		h := uint32(sign) | e<<10 | m
		if rest > 0x1000 || rest == 0x1000 && m&1 == 1 {
			h++ // may carry into the exponent, which is right
		}
		return uint16(h)
	case exp-127 >= -25: // subnormal
		mant |= 0x800000
		shift := uint32(-14-(exp-127)) + 13
		m := mant >> shift
		rest := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && m&1 == 1 {
			m++
		}
		return sign | uint16(m)
	default:
		return sign
	}
}

// F16ToFloat32 converts IEEE half precision to float32.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	default: // subnormal
		e := uint32(113)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
}

// Q8_0 blocks: 32 values as a half-precision scale and 32 int8s.
const (
	q8Block = 32
	q8Bytes = 34
)

// AppendQ8_0 appends src (a multiple of 32 values) quantized to Q8_0, the
// way ggml's reference quantizer does.
func AppendQ8_0(dst []byte, src []float32) ([]byte, error) {
	if len(src)%q8Block != 0 {
		return dst, fmt.Errorf("Q8_0: %d values are not whole blocks of %d", len(src), q8Block)
	}
	for b := 0; b < len(src); b += q8Block {
		blk := src[b : b+q8Block]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		dst = binary.LittleEndian.AppendUint16(dst, Float32ToF16(d))
		for _, v := range blk {
			dst = append(dst, byte(int8(math.Round(float64(v*id)))))
		}
	}
	return dst, nil
}

// Dequantize converts n values of tensor data of type t to float64.
func Dequantize(t TensorType, data []byte, n int) ([]float64, error) {
	out := make([]float64, n)
	switch t {
	case F32:
		if len(data) < 4*n {
			return nil, fmt.Errorf("F32: %d bytes for %d values", len(data), n)
		}
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		}
	case F16:
		if len(data) < 2*n {
			return nil, fmt.Errorf("F16: %d bytes for %d values", len(data), n)
		}
		for i := range out {
			out[i] = float64(F16ToFloat32(binary.LittleEndian.Uint16(data[2*i:])))
		}
	case Q8_0:
		if n%q8Block != 0 || len(data) < n/q8Block*q8Bytes {
			return nil, fmt.Errorf("Q8_0: %d bytes for %d values", len(data), n)
		}
		for b := 0; b < n/q8Block; b++ {
			blk := data[b*q8Bytes:]
			d := float64(F16ToFloat32(binary.LittleEndian.Uint16(blk)))
			for i := 0; i < q8Block; i++ {
				out[b*q8Block+i] = d * float64(int8(blk[2+i]))
			}
		}
	default:
		return nil, fmt.Errorf("dequantize %s: only F32, F16 and Q8_0 are supported here", t)
	}
	return out, nil
}
