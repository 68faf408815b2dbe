package runner

import (
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
)

// FuzzTPStep: a follower decodes any control payload without panicking;
// what the leader encodes decodes to the same batch.
func FuzzTPStep(f *testing.F) {
	f.Add(appendBatch(nil, backend.Batch{Tokens: []int32{1, 2, 3}, Positions: []int32{0, 1, 2}})[1:])
	f.Add(appendBatch(nil, backend.Batch{Hidden: []float32{0.5, -1}, Positions: []int32{7}, Seqs: []int{3}, Outputs: []int32{0}, AllLogits: true})[1:])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := readBatch(payload)
		if err != nil {
			return
		}
		again, err := readBatch(appendBatch(nil, b)[1:])
		if err != nil {
			t.Fatalf("a decoded batch does not decode again: %v", err)
		}
		if !slices.Equal(again.Tokens, b.Tokens) || !slices.Equal(again.Positions, b.Positions) || !slices.Equal(again.Seqs, b.Seqs) ||
			!slices.Equal(again.Outputs, b.Outputs) || again.AllLogits != b.AllLogits || len(again.Hidden) != len(b.Hidden) {
			t.Fatalf("round trip changed the batch: %+v vs %+v", again, b)
		}
	})
}
