package clustertest

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// Each frame reads back as its message, and holds nothing more.
func TestFrames(t *testing.T) {
	msgs := []wire.Message{&wire.Fetch{Since: 7}, &wire.TraceChunk{Task: "t1", Rank: 1, Seq: 2, Final: true, Data: []byte(`{}`)}}
	frames := Frames(t, msgs...)
	if len(frames) != len(msgs) {
		t.Fatalf("%d frames of %d messages", len(frames), len(msgs))
	}
	for i, fr := range frames {
		r := bytes.NewReader(fr)
		typ, payload, err := wire.ReadFrame(r, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		m, err := wire.Decode(typ, payload)
		if err != nil || !reflect.DeepEqual(m, msgs[i]) || r.Len() != 0 {
			t.Errorf("frame %d reads as %#v (%v, %d bytes left), want %#v", i, m, err, r.Len(), msgs[i])
		}
	}
}
