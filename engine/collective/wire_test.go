package collective

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// Every finite f16 and bf16 value survives f32 and back, bit for bit,
// through the conversions the wire uses (gguf's); values between two f16s
// round to the nearer (ties to even), past the largest to Inf, below the
// smallest subnormal's half to zero.
func TestWireConversions(t *testing.T) {
	for h := range 1 << 16 {
		u := uint16(h)
		if u&0x7c00 == 0x7c00 && u&0x3ff != 0 { // NaN
			if x := gguf.F16ToFloat32(u); !math.IsNaN(float64(x)) {
				t.Fatalf("f16 %#04x: %v, want NaN", u, x)
			}
			continue
		}
		if got := gguf.Float32ToF16(gguf.F16ToFloat32(u)); got != u {
			t.Fatalf("f16 %#04x → %v → %#04x", u, gguf.F16ToFloat32(u), got)
		}
		if b := math.Float32frombits(uint32(u) << 16); !math.IsNaN(float64(b)) && gguf.Float32ToBF16(b) != u {
			t.Fatalf("bf16 %#04x → %v → %#04x", u, b, gguf.Float32ToBF16(b))
		}
	}
	for _, c := range []struct {
		x    float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {1e6, 0x7c00},
		{1 + 1.0/2048, 0x3c00}, // a tie: to even
		{1 + 3.0/2048, 0x3c02}, // a tie: to even, up
		{1 + 1.0/2048 + 1e-7, 0x3c01},
		{5.960464477539063e-08, 0x0001}, // the smallest subnormal
		{2.98e-08, 0x0000},              // under its half
		{float32(math.Inf(-1)), 0xfc00},
	} {
		if got := gguf.Float32ToF16(c.x); got != c.want {
			t.Errorf("gguf.Float32ToF16(%v) = %#04x, want %#04x", c.x, got, c.want)
		}
	}
	if got := gguf.Float32ToBF16(1 + 1.0/256); got != 0x3f80 { // a tie: to even
		t.Errorf("gguf.Float32ToBF16(1+2^-8) = %#04x", got)
	}
}

// Over a 16-bit wire every rank still ends with the same bits: the sum in
// rank order of the values each rank rounded (and, by scatter and gather,
// each chunk's sum rounded once more), for half the bytes; within the
// type's precision of the exact sum.
func TestAllReduce16BitWire(t *testing.T) {
	for _, w := range []Wire{WireF16, WireBF16} {
		for _, c := range []struct{ n, size int }{{2, 2048}, {3, 2048}, {3, 1<<16 + 1}} {
			t.Run(fmt.Sprintf("%s-%d-ranks-%d", w, c.n, c.size), func(t *testing.T) {
				ms := group(t, c.n, "secret")
				in := make([][]float32, c.n)
				for r := range in {
					in[r] = make([]float32, c.size)
					for i := range in[r] {
						in[r][i] = float32(math.Sin(float64(1+i*7+r*13))) * float32(1+r)
					}
				}
				for _, m := range ms {
					m.Wire = w
				}
				out := sumAll(t, ms, in, (*Mesh).AllReduce)
				scatter := c.size*2 >= DefaultScatterMin
				want := make([]float32, c.size)
				for r := range c.n {
					v := slices.Clone(in[r])
					w.round(v)
					for i, x := range v {
						want[i] += x
					}
				}
				if scatter {
					w.round(want)
				}
				var worst float64
				for r := range c.n {
					if !slices.Equal(out[r], want) {
						t.Fatalf("rank %d: not the rounded parts' sum", r)
					}
				}
				for i := range want {
					var exact float64
					for r := range c.n {
						exact += float64(in[r][i])
					}
					worst = max(worst, math.Abs(float64(want[i])-exact))
				}
				bound := 3.0 * float64(c.n+1) / 2048 // f16: 11 bits; bf16: 8
				if w == WireBF16 {
					bound *= 8
				}
				if worst > bound {
					t.Errorf("max |Δ| from the exact sum %.3g, over %.3g", worst, bound)
				}
				if direct := c.size * 2 * (c.n - 1); !scatter && ms[0].BytesSent != uint64(direct) {
					t.Errorf("rank 0 sent %d bytes, want %d (2 a value)", ms[0].BytesSent, direct)
				}
			})
		}
	}
	// Ranks on different wires fail the group, naming the sizes.
	ms := group(t, 2, "secret")
	ms[1].Wire = WireF16
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, m := range ms {
		wg.Go(func() { errs[r] = m.AllReduce(make([]float32, 64)) })
	}
	wg.Wait()
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "128 bytes, want") {
		t.Errorf("f32 against f16: %v", errs[0])
	}
}

// AllReduceExact sends f32 whatever the wire: on a 16-bit mesh, the sum
// of values no 16-bit type holds comes out exact, by both algorithms; the
// next AllReduce rounds again, and leaves the exact sum's buffers alone.
func TestAllReduceExactOn16BitWire(t *testing.T) {
	for _, c := range []struct{ n, size int }{{2, 4096}, {3, 1 << 16}} {
		t.Run(fmt.Sprintf("%d-ranks-%d", c.n, c.size), func(t *testing.T) {
			ms := group(t, c.n, "secret")
			in := make([][]float32, c.n)
			for r := range in {
				in[r] = make([]float32, c.size)
				for i := range in[r] {
					// Rank r's rows among zeros, as a gathered head's.
					if i*c.n/c.size == r {
						in[r][i] = 1 + float32(i%977)/4096 // 1 + k·2^-12: not an f16 or bf16
					}
				}
			}
			for _, m := range ms {
				m.Wire = WireBF16
			}
			want := make([]float32, c.size)
			for r := range in {
				for i, x := range in[r] {
					want[i] += x
				}
			}
			exact := sumAll(t, ms, in, (*Mesh).AllReduceExact)
			for r, got := range exact {
				if !slices.Equal(got, want) {
					t.Fatalf("AllReduceExact, rank %d: not the exact sum", r)
				}
			}
			if got := sumAll(t, ms, in, (*Mesh).AllReduce)[0]; slices.Equal(got, want) {
				t.Error("AllReduce over bf16 after AllReduceExact: the exact sum, want it rounded")
			}
			// The 16-bit sum wrote nothing into the exact sum's buffers
			// (which the f32 round sent from).
			for r, got := range exact {
				if !slices.Equal(got, want) {
					t.Fatalf("rank %d: the exact sum changed under the next 16-bit one", r)
				}
			}
		})
	}
}

// sumAll has every rank of ms sum a copy of its in[r] at once with sum,
// and returns the copies.
func sumAll(t *testing.T, ms []*Mesh, in [][]float32, sum func(*Mesh, []float32) error) [][]float32 {
	t.Helper()
	out := make([][]float32, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for r, m := range ms {
		wg.Go(func() {
			out[r] = slices.Clone(in[r])
			errs[r] = sum(m, out[r])
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

// SentTo counts what a rank wrote to each link: an all-reduce's frame,
// its header included.
func TestSentTo(t *testing.T) {
	ms := group(t, 2, "secret")
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { m.AllReduce(make([]float32, 2048)) })
	}
	wg.Wait()
	if got, want := ms[0].SentTo(1), uint64(2048*4+headerLen); got != want {
		t.Errorf("rank 0 sent %d bytes to rank 1, want %d", got, want)
	}
	if ms[0].SentTo(0) != 0 || ms[0].SentTo(5) != 0 {
		t.Error("no link to itself or to a rank out of the group")
	}
}

// BenchmarkWireConvert is what a 16-bit wire adds to a 2-rank all-reduce
// of a prefill's 1 Mi values (512 rows of 2048): rounding this rank's
// values, encoding them, decoding the other's. Against the bytes it saves
// (2 a value), it says how slow a link must be for the wire to pay.
func BenchmarkWireConvert(b *testing.B) {
	v := make([]float32, 1<<20)
	for i := range v {
		v[i] = float32(math.Sin(float64(i))) * 3
	}
	for _, w := range []Wire{WireF16, WireBF16} {
		b.Run(w.String(), func(b *testing.B) {
			var enc []byte
			var dec []float32
			b.SetBytes(int64(len(v) * 2)) // the bytes saved
			for range b.N {
				w.round(v)
				enc = w.encode(enc, v)
				dec = w.decode(dec, enc)
			}
		})
	}
}
