package clustertest

import (
	"bytes"
	"testing"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Frames is each message framed as a stream carries it: the seeds of a
// fuzz target that reads messages off a stream.
func Frames(tb testing.TB, msgs ...wire.Message) [][]byte {
	tb.Helper()
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		typ, b, err := wire.Encode(m)
		if err != nil {
			tb.Fatalf("encode %T: %v", m, err)
		}
		var buf bytes.Buffer
		if err := wire.WriteFrame(&buf, typ, b); err != nil {
			tb.Fatalf("frame %T: %v", m, err)
		}
		out[i] = buf.Bytes()
	}
	return out
}
