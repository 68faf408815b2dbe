package collective

import (
	"fmt"
	"math"
)

// Wire is how an all-reduce's values travel. Every rank of a group must
// use the same (a rank that does not reads frames of the wrong size and
// fails the group, naming the sizes).
type Wire uint8

const (
	// WireF32 sends the values as they are: the sum is the one a single
	// process would add up in rank order, to the bit. The default.
	WireF32 Wire = iota
	// WireF16 and WireBF16 send half the bytes: each rank rounds its own
	// values to the 16-bit type first, so that every rank still adds the
	// same numbers and gets the same bits, but the sum is of rounded
	// parts (docs/inference.md measures what that costs).
	WireF16
	WireBF16
)

// ParseWire reads "f32", "f16" or "bf16".
func ParseWire(s string) (Wire, error) {
	switch s {
	case "f32", "":
		return WireF32, nil
	case "f16":
		return WireF16, nil
	case "bf16":
		return WireBF16, nil
	}
	return 0, fmt.Errorf("all-reduce wire type %q: want f32, f16 or bf16", s)
}

func (w Wire) String() string {
	switch w {
	case WireF16:
		return "f16"
	case WireBF16:
		return "bf16"
	}
	return "f32"
}

// size is the bytes of one value on the wire.
func (w Wire) size() int {
	if w == WireF32 {
		return 4
	}
	return 2
}

// round rounds v in place to what the wire carries.
func (w Wire) round(v []float32) {
	switch w {
	case WireF16:
		for i, x := range v {
			v[i] = f16ToF32(f32ToF16(x))
		}
	case WireBF16:
		for i, x := range v {
			v[i] = math.Float32frombits(uint32(f32ToBF16(x)) << 16)
		}
	}
}

// encode writes v (already rounded) as the wire's values into dst's
// storage when it fits.
func (w Wire) encode(dst []byte, v []float32) []byte {
	if w == WireF32 {
		return floatBytes(v)
	}
	n := 2 * len(v)
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	for i, x := range v {
		var h uint16
		if w == WireF16 {
			h = f32ToF16(x)
		} else {
			h = f32ToBF16(x)
		}
		dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
	}
	return dst
}

// decode reads b's values into dst's storage when it fits.
func (w Wire) decode(dst []float32, b []byte) []float32 {
	if w == WireF32 {
		return bytesFloats(b)
	}
	n := len(b) / 2
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	for i := range dst {
		h := uint16(b[2*i]) | uint16(b[2*i+1])<<8
		if w == WireF16 {
			dst[i] = f16ToF32(h)
		} else {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
	}
	return dst
}

// f32ToBF16 rounds to nearest even (NaN kept a quiet NaN).
func f32ToBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// f32ToF16 rounds to nearest even; beyond f16's range, ±Inf.
func f32ToF16(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf, NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15:
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		e := uint32(exp-127+15) << 10
		v := e | man>>13
		rem := man & 0x1fff
		if rem > 0x1000 || rem == 0x1000 && v&1 == 1 {
			v++ // may carry into the exponent, up to Inf: correct
		}
		return sign | uint16(v)
	case exp-127 >= -25: // subnormal
		man |= 0x800000
		shift := uint32(-14-(exp-127)) + 13
		v := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && v&1 == 1 {
			v++
		}
		return sign | uint16(v)
	}
	return sign
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(man) / (1 << 24) // man × 2^-24
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp-15+127)<<23 | man<<13)
}
