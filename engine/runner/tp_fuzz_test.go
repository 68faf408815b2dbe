package runner

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/trace"
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

// FuzzTPTrace: a follower takes any trace message without panicking, and
// one it accepts opens the slot's trace under the id it carries.
func FuzzTPTrace(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 't', '1'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'x'})
	f.Fuzz(func(t *testing.T, payload []byte) {
		ended := 0
		ft := &followTraces{slots: 4, f: &TPFollower{OnTrace: func(string, []trace.Span, []trace.CounterSample, error) { ended++ }}}
		if err := ft.control(payload); err != nil {
			return
		}
		id := string(payload[4:])
		slot := int(int32(binary.LittleEndian.Uint32(payload)))
		if got := ft.open[slot]; (id != "") != (got != nil) || got != nil && got.id != id {
			t.Fatalf("slot %d traced as %+v after a message for %q", slot, got, id)
		}
		ft.endAll(nil)
		if want := len(id); (want > 0) != (ended == 1) || len(ft.open) != 0 {
			t.Fatalf("%d traces handed over, %d open, after %q", ended, len(ft.open), id)
		}
	})
}
