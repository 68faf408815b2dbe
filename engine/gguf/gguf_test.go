package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sampleKVs() []KV {
	return []KV{
		{"general.architecture", "llama"},
		{"llama.block_count", uint32(2)},
		{"llama.rope.freq_base", float32(10000)},
		{"general.flag", true},
		{"x.i64", int64(-5)},
		{"x.f64", 1.5},
		{"tokenizer.ggml.tokens", []string{"<s>", "a", "é"}},
		{"tokenizer.ggml.scores", []float32{0, -1, -2}},
		{"tokenizer.ggml.token_type", []int32{3, 1, 1}},
		{"x.u8", uint8(7)}, {"x.i8", int8(-7)}, {"x.u16", uint16(9)}, {"x.i16", int16(-9)}, {"x.u64", uint64(1 << 40)},
	}
}

func sampleTensors() []WriteTensor {
	f32 := func(vals ...float32) func(io.Writer) error {
		return func(w io.Writer) error { return binary.Write(w, binary.LittleEndian, vals) }
	}
	q := make([]float32, 64)
	for i := range q {
		q[i] = float32(i) - 31.5
	}
	qb, _ := AppendQ8_0(nil, q)
	return []WriteTensor{
		{Name: "a", Type: F32, Dims: []uint64{3}, Data: f32(1, 2, 3)},
		{Name: "b", Type: Q8_0, Dims: []uint64{32, 2}, Data: func(w io.Writer) error { _, err := w.Write(qb); return err }},
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := WriteFile(path, sampleKVs(), sampleTensors()); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.KV, sampleKVs()) {
		t.Errorf("KV = %#v", f.KV)
	}
	if f.String("general.architecture", "") != "llama" || f.Uint("llama.block_count", 0) != 2 || f.Float("llama.rope.freq_base", 0) != 10000 ||
		!f.Bool("general.flag", false) || len(f.Strings("tokenizer.ggml.tokens")) != 3 || f.Uint("x.i64", 99) != 99 {
		t.Error("typed getters disagree")
	}
	a, _ := f.Tensor("a")
	b, _ := f.Tensor("b")
	if a.Size != 12 || b.Size != 68 || b.Offset%32 != 0 || f.DataOffset%32 != 0 || b.Elements() != 64 {
		t.Errorf("tensors %+v %+v, data at %d", a, b, f.DataOffset)
	}
}

func TestF16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := Float32ToF16(f); back != uint16(h) {
			t.Fatalf("%#04x → %g → %#04x", h, f, back)
		}
	}
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00}, {1.0009765625 + 1.0/4096, 0x3c01}, {5.96e-8, 0x0001}, {1e-9, 0}} {
		if got := Float32ToF16(c.f); got != c.h {
			t.Errorf("F16(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
}

func TestQ8_0(t *testing.T) {
	src := make([]float32, 96)
	for i := range src {
		src[i] = float32(math.Sin(float64(i))) * float32(i%7+1)
	}
	b, err := AppendQ8_0(nil, src)
	if err != nil || len(b) != 3*34 {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	back, err := Dequantize(Q8_0, b, len(src))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range src {
		if d := math.Abs(back[i] - float64(v)); d > 7.0/127/2*1.01 {
			t.Errorf("value %d: %g → %g", i, v, back[i])
		}
	}
	if _, err := AppendQ8_0(nil, src[:5]); err == nil {
		t.Error("a partial block was quantized")
	}
}

func header(t *testing.T) []byte {
	var buf bytes.Buffer
	if err := Write(&buf, sampleKVs(), sampleTensors()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMalformed(t *testing.T) {
	good := header(t)
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "unexpected EOF"},
		{"magic", mod(func(b []byte) []byte { b[0] = 'X'; return b }), "not a GGUF file"},
		{"version", mod(func(b []byte) []byte { b[4] = 9; return b }), "version 9"},
		{"many kvs", mod(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<40); return b }), "metadata entries, limit"},
		{"many tensors", mod(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[8:], 1<<40); return b }), "tensors, limit"},
		{"long key", mod(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[24:], 1<<50); return b }), "string of"},
		{"truncated header", good[:100], "unexpected EOF"},
		{"truncated data", good[:len(good)-40], "past the end of the file"},
		{"value type", mod(func(b []byte) []byte {
			i := bytes.Index(b, []byte("general.architecture")) + len("general.architecture")
			b[i] = 77
			return b
		}), "unknown value type 77"},
	} {
		_, err := Read(bytes.NewReader(c.in), int64(len(c.in)), Limits{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := Read(bytes.NewReader(good), int64(len(good)), Limits{MaxArray: 2}); err == nil || !strings.Contains(err.Error(), "array of 3 elements") {
		t.Errorf("array limit: %v", err)
	}
}

// FuzzRead: any bytes either fail with an error or give a header whose
// tensors lie within the input.
func FuzzRead(f *testing.F) {
	f.Add(header(&testing.T{}))
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := Read(bytes.NewReader(data), int64(len(data)), Limits{MaxMetaBytes: 1 << 20, MaxArray: 1 << 12})
		if err != nil {
			return
		}
		for _, tn := range gf.Tensors {
			if uint64(gf.DataOffset)+tn.Offset+tn.Size > uint64(len(data)) {
				t.Fatalf("tensor %q past the end", tn.Name)
			}
		}
	})
}

func TestBF16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {0, 0},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{float32(math.Inf(1)), 0x7f80},
	} {
		if got := Float32ToBF16(c.in); got != c.want {
			t.Errorf("Float32ToBF16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := Float32ToBF16(float32(math.NaN())); BF16ToFloat32(got) == BF16ToFloat32(got) {
		t.Errorf("NaN became %#04x, not a NaN", got)
	}
	if BF16ToFloat32(0x3f80) != 1 {
		t.Error("BF16ToFloat32(0x3f80) != 1")
	}
}

func TestQ4_0(t *testing.T) {
	src := make([]float32, 64)
	for i := range src {
		src[i] = float32(math.Sin(float64(i)*0.7)) * float32(1+i%5)
	}
	src[40] = -9 // the block's largest magnitude, negative: d = 9/8
	b, err := AppendQ4_0(nil, src)
	if err != nil || len(b) != 2*18 {
		t.Fatalf("AppendQ4_0: %d bytes, %v", len(b), err)
	}
	back, err := Dequantize(Q4_0, b, len(src))
	if err != nil {
		t.Fatal(err)
	}
	if back[40] != -9 {
		t.Errorf("the block's extreme value came back as %g", back[40])
	}
	for blk := 0; blk < 2; blk++ {
		d := math.Abs(float64(F16ToFloat32(binary.LittleEndian.Uint16(b[blk*18:]))))
		for i := blk * 32; i < blk*32+32; i++ {
			if e := math.Abs(back[i] - float64(src[i])); e > d/2+1e-6 {
				t.Errorf("value %d: %g came back as %g (step %g)", i, src[i], back[i], d)
			}
		}
	}
	if _, err := AppendQ4_0(nil, src[:33]); err == nil {
		t.Error("33 values quantized")
	}
}

func TestMXFP4(t *testing.T) {
	// Block 0 holds values E2M1 represents exactly at scale 2^-3; block 1
	// random values, each within half the widest step (4 codes) of a code.
	src := make([]float32, 64)
	exact := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for i := range 32 {
		src[i] = exact[i%8] / 8
		if i%3 == 0 {
			src[i] = -src[i]
		}
	}
	for i := 32; i < 64; i++ {
		src[i] = float32(math.Sin(float64(i)*1.3)) * 0.05
	}
	b, err := AppendMXFP4(nil, src)
	if err != nil || len(b) != 2*17 {
		t.Fatalf("AppendMXFP4: %d bytes, %v", len(b), err)
	}
	if b[0] != 127-3 { // amax 6/8: floor(log2 0.75) - 2 + 127
		t.Errorf("block 0 exponent %d, want %d", b[0], 127-3)
	}
	back, err := Dequantize(MXFP4, b, len(src))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		if back[i] != float64(src[i]) {
			t.Errorf("value %d: %g came back as %g", i, src[i], back[i])
		}
	}
	d := float64(e8m0Half(b[17]))
	for i := 32; i < 64; i++ {
		if e := math.Abs(back[i] - float64(src[i])); e > 2*d {
			t.Errorf("value %d: %g came back as %g (scale %g)", i, src[i], back[i], d)
		}
	}
	if e8m0Half(0) != float32(math.Ldexp(1, -128)) || e8m0Half(1) != float32(math.Ldexp(1, -127)) || e8m0Half(200) != float32(math.Ldexp(1, 72)) {
		t.Error("E8M0 half scale wrong at 0, 1 or 200")
	}
	if _, err := AppendMXFP4(nil, src[:33]); err == nil {
		t.Error("33 values quantized")
	}
	if _, err := Dequantize(MXFP4, b[:20], 64); err == nil {
		t.Error("20 bytes dequantized as 64 MXFP4 values")
	}
}

// mxfp4Index, which searches code 0 and x's sign half, picks what ggml's
// 16-way search does, ties included.
func TestMXFP4Index(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, e := range []byte{1, 100, 124, 127, 130} {
		d := e8m0Half(e)
		var cand [16]float32
		for i, v := range mxfp4Values {
			cand[i] = float32(v) * d
		}
		xs := []float32{0, float32(math.Copysign(0, -1))}
		for _, c := range cand { // the codes, the midpoints, and beyond
			xs = append(xs, c, c+d/2, c-d/2, c*1.5)
		}
		for range 2000 {
			xs = append(xs, float32(rng.NormFloat64())*8*d)
		}
		for _, x := range xs {
			want, be := 0, float32(math.Abs(float64(cand[0]-x)))
			for i := 1; i < 16; i++ {
				if err := float32(math.Abs(float64(cand[i] - x))); err < be {
					want, be = i, err
				}
			}
			if got := mxfp4Index(&cand, x); int(got) != want {
				t.Fatalf("scale %g, x %g: code %d, want %d", d, x, got, want)
			}
		}
	}
}

// Q5_0 is read as ggml's dequantize_row_q5_0: the fifth bit of value j
// is bit j of qh (bit j+16 for value j+16), values offset by 16.
func TestQ5_0(t *testing.T) {
	b := make([]byte, 22)
	binary.LittleEndian.PutUint16(b, Float32ToF16(0.5))
	binary.LittleEndian.PutUint32(b[2:], 1|1<<17) // value 0's and value 17's high bits
	b[6] = 0x3f                                   // value 0: 15 (+16), value 16: 3
	b[7] = 0x20                                   // value 1: 0, value 17: 2 (+16)
	y, err := Dequantize(Q5_0, b, 32)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]float64{0: 7.5, 16: -6.5, 1: -8, 17: 1, 5: -8}
	for i, w := range want {
		if y[i] != w {
			t.Errorf("value %d = %g, want %g", i, y[i], w)
		}
	}
}
