package tracecollect

import (
	"testing"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Chunks pushed to the spill file while the popper has caught up with it
// are read back: the reader reached the file's end before they were
// written.
func TestOutboxSpillFileGrowsBehindTheReader(t *testing.T) {
	b := newOutbox(t.TempDir(), 0) // no memory: every chunk to the file
	push := func(seq int) {
		t.Helper()
		if err := b.push(&wire.TraceChunk{Task: "t", Seq: seq, Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 4 {
		push(2 * round)
		push(2*round + 1)
		for want := 2 * round; want < 2*round+2; want++ {
			c, err := b.pop()
			if err != nil || c == nil || c.Seq != want {
				t.Fatalf("round %d: pop = %+v, %v; want chunk %d", round, c, err, want)
			}
		}
	}
	b.close()
	if c, err := b.pop(); c != nil || err != nil {
		t.Fatalf("after close: %+v, %v", c, err)
	}
}
