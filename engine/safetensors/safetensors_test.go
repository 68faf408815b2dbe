package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// build writes a file with the given header (its data section is data).
func build(t testing.TB, hdr map[string]any, data []byte) []byte {
	h, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), data...)
}

func f32s(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestParseAndRead(t *testing.T) {
	data := append(f32s(1, 2, 3, 4, 5, 6), 0x00, 0x3c, 0x80, 0x3f) // then F16 1.0 and BF16 1.0
	file := build(t, map[string]any{
		"__metadata__": map[string]string{"arch": "llama"},
		"w":            map[string]any{"dtype": "F32", "shape": []int{2, 3}, "data_offsets": []int{0, 24}},
		"h":            map[string]any{"dtype": "F16", "shape": []int{1}, "data_offsets": []int{24, 26}},
		"b":            map[string]any{"dtype": "BF16", "shape": []int{1}, "data_offsets": []int{26, 28}},
	}, data)
	f, err := Parse(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["arch"] != "llama" || len(f.Tensors) != 3 || f.Tensors[0].Name != "w" {
		t.Fatalf("parsed %+v", f)
	}
	for name, want := range map[string][]float32{"w": {1, 2, 3, 4, 5, 6}, "h": {1}, "b": {1}} {
		tt, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("no tensor %q", name)
		}
		got, err := f.Floats(tt)
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: %v %v", name, got, err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
			}
		}
	}
}

func TestParseRefuses(t *testing.T) {
	ok := map[string]any{"dtype": "F32", "shape": []int{2}, "data_offsets": []int{0, 8}}
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2}, "shorter than"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "header of"},
		{"not json", append(binary.LittleEndian.AppendUint64(nil, 3), "{x}"...), "header JSON"},
		{"dtype", build(t, map[string]any{"w": map[string]any{"dtype": "I8", "shape": []int{1}, "data_offsets": []int{0, 1}}}, make([]byte, 1)), `dtype "I8"`},
		{"past end", build(t, map[string]any{"w": ok}, make([]byte, 4)), "data_offsets"},
		{"size", build(t, map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{3}, "data_offsets": []int{0, 8}}}, make([]byte, 8)), "want 12"},
		{"overlap", build(t, map[string]any{"a": ok, "b": map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{4, 8}}}, make([]byte, 8)), "overlap"},
		{"negative", build(t, map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{-1}, "data_offsets": []int{0, 0}}}, nil), "shape"},
		{"metadata", build(t, map[string]any{"__metadata__": map[string]int{"a": 1}}, nil), "__metadata__"},
	} {
		_, err := Parse(bytes.NewReader(c.file), int64(len(c.file)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one naming %q", c.name, err, c.want)
		}
	}
}

// FuzzParse: any bytes give a File or an error, never a panic; a parsed
// file's every tensor can be read.
func FuzzParse(f *testing.F) {
	f.Add(build(f, map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{2}, "data_offsets": []int{0, 8}}}, make([]byte, 8)))
	f.Add(build(f, map[string]any{"__metadata__": map[string]string{"a": "b"}, "h": map[string]any{"dtype": "F16", "shape": []int{1, 1}, "data_offsets": []int{0, 2}}}, make([]byte, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, tt := range file.Tensors {
			if _, err := file.Floats(tt); err != nil {
				t.Fatalf("parsed tensor %q cannot be read: %v", tt.Name, err)
			}
		}
	})
}

// An empty tensor overlaps nothing, wherever its offsets point.
func TestParseEmptyTensor(t *testing.T) {
	file := build(t, map[string]any{
		"w": map[string]any{"dtype": "F32", "shape": []int{2}, "data_offsets": []int{0, 8}},
		"e": map[string]any{"dtype": "F32", "shape": []int{0}, "data_offsets": []int{4, 4}},
	}, make([]byte, 8))
	if _, err := Parse(bytes.NewReader(file), int64(len(file))); err != nil {
		t.Fatal(err)
	}
}
