package placement

import (
	"encoding/binary"
	"testing"
)

// Layer ranges come from a request (POST /instance's ranks): whatever they
// are, Ranges refuses them with an error or places ranks that cover the
// model's layers in order; Split, over the same nodes, does too.
func FuzzRanges(f *testing.F) {
	f.Add(uint8(4), []byte{0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0})
	f.Add(uint8(4), []byte{0, 0, 0, 0, 10, 0, 0, 0})
	f.Add(uint8(1), []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, layers uint8, raw []byte) {
		l := layout(int(layers%64) + 1)
		var ranges [][2]int
		var nodes []Node
		for i := 0; i+8 <= len(raw) && len(ranges) < 16; i += 8 {
			a, b := int32(binary.LittleEndian.Uint32(raw[i:])), int32(binary.LittleEndian.Uint32(raw[i+4:]))
			ranges = append(ranges, [2]int{int(a), int(b)})
			nodes = append(nodes, Node{ID: "n", Available: uint64(uint32(a)) << 20})
		}
		check := func(how string, ranks []Rank) {
			next := 0
			for i, r := range ranks {
				if r.Rank != i || r.FirstLayer != next || r.LastLayer <= r.FirstLayer {
					t.Fatalf("%s: rank %d is %+v after layer %d", how, i, r, next)
				}
				next = r.LastLayer
			}
			if len(ranks) > 0 && next != l.Layers {
				t.Fatalf("%s: ranks cover %d of %d layers", how, next, l.Layers)
			}
		}
		ranks, err := Ranges(l, nodes, ranges)
		if err == nil || len(ranks) > 0 {
			check("Ranges", ranks)
		}
		ranks, _ = Split(l, nodes)
		check("Split", ranks)
	})
}
