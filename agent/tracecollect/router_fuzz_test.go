package tracecollect

import (
	"bytes"
	"testing"

	"github.com/orrery-cluster/orrery/cluster/clustertest"
	"github.com/orrery-cluster/orrery/cluster/wire"
)

// FuzzReadMsg feeds arbitrary bytes to the trace stream's reader: it fails
// cleanly or returns a valid TraceTask or TraceChunk, which survives a
// frame → read round trip unchanged.
func FuzzReadMsg(f *testing.F) {
	for _, seed := range clustertest.Frames(f,
		&wire.TraceTask{Task: "t1", Kind: "ring-bench", Ranks: []wire.TraceRank{{Rank: 0, Node: "a"}, {Rank: 1, Node: "b"}}},
		&wire.TraceChunk{Task: "t1", Rank: 1, Seq: 2, Final: true, Data: []byte(`{"spans":[]}`)},
		&wire.Fetch{Since: 1},
	) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := readMsg(feed(data))
		if err != nil {
			return
		}
		switch msg.(type) {
		case *wire.TraceTask, *wire.TraceChunk:
		default:
			t.Fatalf("read a %T", msg)
		}
		typ, b, err := wire.Encode(msg)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := wire.WriteFrame(&buf, typ, b); err != nil {
			t.Fatal(err)
		}
		back, err := readMsg(feed(buf.Bytes()))
		if err != nil {
			t.Fatalf("re-read %T: %v", msg, err)
		}
		if _, b2, _ := wire.Encode(back); !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed %s into %s", b, b2)
		}
	})
}

func feed(data []byte) *bytes.Reader { return bytes.NewReader(data) }
