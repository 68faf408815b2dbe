package collective

import (
	"fmt"

	"github.com/orrery-cluster/orrery/engine/gguf"
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
			v[i] = gguf.F16ToFloat32(gguf.Float32ToF16(x))
		}
	case WireBF16:
		for i, x := range v {
			v[i] = gguf.BF16ToFloat32(gguf.Float32ToBF16(x))
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
			h = gguf.Float32ToF16(x)
		} else {
			h = gguf.Float32ToBF16(x)
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
			dst[i] = gguf.F16ToFloat32(h)
		} else {
			dst[i] = gguf.BF16ToFloat32(h)
		}
	}
	return dst
}
