package tracecollect

import (
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// FuzzChunk feeds arbitrary chunk payloads from a peer to a collector: it
// must refuse them with an error or keep them, never panic, and a merged
// trace holds only spans of the sender's node and rank with a
// non-negative duration.
func FuzzChunk(f *testing.F) {
	f.Add([]byte(`{"spans":[{"name":"a","cat":"x","startNs":5,"durNs":3,"args":{"peer":1,"has":2}}],"counters":[{"name":"memory","tsNs":1,"value":2}],"dropped":1}`), 0, true)
	f.Add([]byte(`{"spans":[{"durNs":-1}]}`), 1, false)
	f.Add([]byte(`{"spans":null,"counters":[{}]}`), 3, true)
	f.Add([]byte(`{"spans":[{"node":"other","rank":9,"lane":"io","durNs":9223372036854775807}]}`), 0, true)
	f.Fuzz(func(t *testing.T, data []byte, seq int, final bool) {
		m := &wire.TraceChunk{Task: "t", Rank: 1, Seq: seq, Final: final, Data: data}
		if m.Validate() != nil {
			return
		}
		var got *trace.Trace
		c := New(Config{Timeout: time.Hour, Save: func(m *Merged, _ Info) error { got = m.Trace; return nil }})
		if err := c.Task("a", &wire.TraceTask{Task: "t", Ranks: []wire.TraceRank{{Rank: 1, Node: "b"}}}); err != nil {
			t.Fatal(err)
		}
		c.Chunk("b", m)
		c.Close()
		if got == nil {
			t.Fatal("nothing saved on Close")
		}
		for _, s := range got.Spans {
			if s.Node != "b" || s.Rank != 1 || s.DurNs < 0 {
				t.Fatalf("span %+v kept", s)
			}
		}
	})
}
