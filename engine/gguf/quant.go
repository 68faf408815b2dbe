package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Conversions for the types gen-model writes and the reference forward
// pass reads: F32, F16, BF16 and Q8_0.

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

// Float32ToBF16 converts a float32 to bfloat16 (its upper 16 bits),
// rounding to nearest even as ggml's reference converter does; a NaN stays
// a (quiet) NaN.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u>>16)&1)) >> 16)
}

// BF16ToFloat32 converts bfloat16 to float32.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

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

// absMax is the largest magnitude in blk.
func absMax(blk []float32) float32 {
	var m float32
	for _, v := range blk {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

// AppendQ8_0 appends src (a multiple of 32 values) quantized to Q8_0, the
// way ggml's reference quantizer does.
func AppendQ8_0(dst []byte, src []float32) ([]byte, error) {
	if len(src)%q8Block != 0 {
		return dst, fmt.Errorf("Q8_0: %d values are not whole blocks of %d", len(src), q8Block)
	}
	for b := 0; b < len(src); b += q8Block {
		blk := src[b : b+q8Block]
		amax := absMax(blk)
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

// AppendQ4_0 appends src (a multiple of 32 values) quantized to Q4_0 as
// ggml's reference quantizer does: per block, d = (the value of largest
// magnitude) / −8 and 4-bit values offset by 8.
func AppendQ4_0(dst []byte, src []float32) ([]byte, error) {
	if len(src)%q8Block != 0 {
		return dst, fmt.Errorf("Q4_0: %d values are not whole blocks of %d", len(src), q8Block)
	}
	for b := 0; b < len(src); b += q8Block {
		blk := src[b : b+q8Block]
		var amax, vmax float32
		for _, v := range blk {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, vmax = a, v
			}
		}
		d := vmax / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		dst = binary.LittleEndian.AppendUint16(dst, Float32ToF16(d))
		q := func(v float32) byte { return byte(min(15, int8(v*id+8.5))) }
		for j := range 16 {
			dst = append(dst, q(blk[j])|q(blk[j+16])<<4)
		}
	}
	return dst, nil
}

// mxfp4Values are MXFP4's 4-bit E2M1 values, doubled (ggml's
// kvalues_mxfp4): the scale is stored halved to match.
var mxfp4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// MXFP4 blocks: an E8M0 exponent and 32 4-bit values, the first 16 in the
// low nibbles.
const mxfp4Bytes = 17

// e8m0Half is half of the E8M0 scale 2^(e-127), ggml's
// GGML_E8M0_TO_FP32_HALF.
func e8m0Half(e byte) float32 {
	if e < 2 { // subnormal: 2^(-128) or 2^(-127)
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// AppendMXFP4 appends src (a multiple of 32 values) quantized to MXFP4 as
// ggml's reference quantizer does: per block the exponent
// floor(log2(amax)) − 2 (so that the largest value maps near ±6), and each
// value the nearest of the 16 codes (the first on a tie).
func AppendMXFP4(dst []byte, src []float32) ([]byte, error) {
	if len(src)%q8Block != 0 {
		return dst, fmt.Errorf("MXFP4: %d values are not whole blocks of %d", len(src), q8Block)
	}
	for b := 0; b < len(src); b += q8Block {
		blk := src[b : b+q8Block]
		amax := absMax(blk)
		var e byte
		if amax > 0 {
			// As C's (uint8_t)(floorf(log2f(amax)) - 2 + 127), the log
			// rounded to float32 first (just under a power of two it
			// rounds up to it); out of range exponents wrap, which
			// weights never reach.
			e = byte(int(math.Floor(float64(float32(math.Log2(float64(amax)))))) - 2 + 127)
		}
		d := e8m0Half(e)
		var cand [16]float32
		for i, v := range mxfp4Values {
			cand[i] = float32(v) * d
		}
		dst = append(dst, e)
		for j := range 16 {
			dst = append(dst, mxfp4Index(&cand, blk[j])|mxfp4Index(&cand, blk[j+16])<<4)
		}
	}
	return dst, nil
}

// mxfp4Index is ggml's best_index_mxfp4: the code whose value (cand, the
// codes times the scale) is nearest x, the first on a tie. Only code 0 and
// x's own sign half can win: a code of the other sign is further than 0.
func mxfp4Index(cand *[16]float32, x float32) byte {
	abs := func(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }
	first, last := 1, 8 // 1..7: positive codes
	if x < 0 {
		first, last = 9, 16 // 9..15: negative codes (8 is −0, never better than 0)
	}
	bi, be := 0, abs(cand[0]-x)
	for i := first; i < last; i++ {
		if err := abs(cand[i] - x); err < be {
			bi, be = i, err
		}
	}
	return byte(bi)
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
	case BF16:
		if len(data) < 2*n {
			return nil, fmt.Errorf("BF16: %d bytes for %d values", len(data), n)
		}
		for i := range out {
			out[i] = float64(BF16ToFloat32(binary.LittleEndian.Uint16(data[2*i:])))
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
	case MXFP4:
		if n%q8Block != 0 || len(data) < n/q8Block*mxfp4Bytes {
			return nil, fmt.Errorf("MXFP4: %d bytes for %d values", len(data), n)
		}
		for b := 0; b < n/q8Block; b++ {
			blk := data[b*mxfp4Bytes:]
			d := float64(e8m0Half(blk[0]))
			for j := range 16 {
				out[b*q8Block+j] = d * float64(mxfp4Values[blk[1+j]&0xf])
				out[b*q8Block+j+16] = d * float64(mxfp4Values[blk[1+j]>>4])
			}
		}
	case Q4_0, Q5_0, Q4_K, Q5_K, Q6_K:
		ti := tensorTypes[t]
		if uint64(n)%ti.blockElems != 0 || uint64(len(data)) < uint64(n)/ti.blockElems*ti.blockBytes {
			return nil, fmt.Errorf("%s: %d bytes for %d values", t, len(data), n)
		}
		for b := 0; b < n/int(ti.blockElems); b++ {
			blk := data[b*int(ti.blockBytes):][:ti.blockBytes]
			y := out[b*int(ti.blockElems):][:ti.blockElems]
			switch t {
			case Q4_0:
				dequantQ4_0(blk, y)
			case Q5_0:
				dequantQ5_0(blk, y)
			case Q4_K:
				dequantQ4K(blk, y)
			case Q5_K:
				dequantQ5K(blk, y)
			case Q6_K:
				dequantQ6K(blk, y)
			}
		}
	default:
		return nil, fmt.Errorf("dequantize %s: only F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K and MXFP4 are supported here", t)
	}
	return out, nil
}

// The block layouts below are ggml's (ggml-common.h); the arithmetic is
// that of its reference dequantizers, in float64.

func f16At(b []byte) float64 { return float64(F16ToFloat32(binary.LittleEndian.Uint16(b))) }

// dequantQ4_0: a scale and 32 4-bit values offset by 8.
func dequantQ4_0(b []byte, y []float64) {
	d := f16At(b)
	qs := b[2:18]
	for j := range 16 {
		y[j] = float64(int(qs[j]&0xf)-8) * d
		y[j+16] = float64(int(qs[j]>>4)-8) * d
	}
}

// dequantQ5_0: a scale and 32 5-bit values offset by 16, their high bits
// gathered in a 32-bit word.
func dequantQ5_0(b []byte, y []float64) {
	d := f16At(b)
	qh := binary.LittleEndian.Uint32(b[2:6])
	qs := b[6:22]
	for j := range 16 {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float64(int(qs[j]&0xf|h0)-16) * d
		y[j+16] = float64(int(qs[j]>>4|h1)-16) * d
	}
}

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K block.
func scaleMinK4(j int, q []byte) (sc, m float64) {
	if j < 4 {
		return float64(q[j] & 63), float64(q[j+4] & 63)
	}
	return float64(q[j+4]&0xf | (q[j-4]>>6)<<4), float64(q[j+4]>>4 | (q[j]>>6)<<4)
}

// dequantQ4K: d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles.
func dequantQ4K(b []byte, y []float64) {
	d, dmin := f16At(b), f16At(b[2:])
	scales, q := b[4:16], b[16:144]
	for j, is := 0, 0; j < 256; j, is = j+64, is+2 {
		sc1, m1 := scaleMinK4(is, scales)
		sc2, m2 := scaleMinK4(is+1, scales)
		for l := range 32 {
			y[j+l] = d*sc1*float64(q[l]&0xf) - dmin*m1
			y[j+32+l] = d*sc2*float64(q[l]>>4) - dmin*m2
		}
		q = q[32:]
	}
}

// dequantQ5K: as Q4_K plus a fifth bit per value in qh.
func dequantQ5K(b []byte, y []float64) {
	d, dmin := f16At(b), f16At(b[2:])
	scales, qh, ql := b[4:16], b[16:48], b[48:176]
	u1, u2 := byte(1), byte(2)
	for j, is := 0, 0; j < 256; j, is = j+64, is+2 {
		sc1, m1 := scaleMinK4(is, scales)
		sc2, m2 := scaleMinK4(is+1, scales)
		for l := range 32 {
			h1, h2 := 0, 0
			if qh[l]&u1 != 0 {
				h1 = 16
			}
			if qh[l]&u2 != 0 {
				h2 = 16
			}
			y[j+l] = d*sc1*float64(int(ql[l]&0xf)+h1) - dmin*m1
			y[j+32+l] = d*sc2*float64(int(ql[l]>>4)+h2) - dmin*m2
		}
		ql = ql[32:]
		u1 <<= 2
		u2 <<= 2
	}
}

// dequantQ6K: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8
// scales, then d.
func dequantQ6K(b []byte, y []float64) {
	ql, qh, sc := b[0:128], b[128:192], b[192:208]
	d := f16At(b[208:])
	for n := 0; n < 256; n += 128 {
		for l := range 32 {
			is := l / 16
			q1 := int(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			y[n+l] = d * float64(int8(sc[is])) * float64(q1)
			y[n+l+32] = d * float64(int8(sc[is+2])) * float64(q2)
			y[n+l+64] = d * float64(int8(sc[is+4])) * float64(q3)
			y[n+l+96] = d * float64(int8(sc[is+6])) * float64(q4)
		}
		ql, qh, sc = ql[64:], qh[32:], sc[8:]
	}
}
