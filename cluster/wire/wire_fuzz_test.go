package wire

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame reader and the message
// decoder: they must fail cleanly, and whatever decodes must survive an
// encode → frame → read → decode round trip unchanged.
func FuzzReadFrame(f *testing.F) {
	for _, m := range []Message{
		&Hello{NodeID: "a", Version: "v"},
		&Heartbeat{NodeID: "a", Members: []string{"b"}},
		&Events{MasterID: "m", Events: []IndexedEvent{{Idx: 1, Type: "t", Event: []byte(`{}`)}}},
		&Snapshot{MasterID: "m", State: []byte(`{}`)},
		&RingStart{Bench: "r1", Order: []string{"a", "b"}, Size: 10, Rounds: 1},
		&RingReport{Bench: "r1", From: "a", To: "b", Hops: []RingHop{{Round: 0, LatencyNs: 5}}},
		&Hello{NodeID: "a", Purpose: "ring", StreamID: "r1"},
		&Hello{NodeID: "a", Purpose: "trace"},
		&Hello{NodeID: "a", Purpose: "probe"},
		&TraceTask{Task: "t1", Kind: "ring-bench", Ranks: []TraceRank{{0, "a"}, {1, "b"}}},
		&TraceChunk{Task: "t1", Rank: 1, Seq: 2, Final: true, Data: []byte(`{"spans":[]}`)},
	} {
		typ, b, _ := Encode(m)
		var buf bytes.Buffer
		WriteFrame(&buf, typ, b)
		f.Add(buf.Bytes())
	}
	f.Add([]byte{0, 0, 0, 1, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, payload, err := ReadFrame(bytes.NewReader(data), 1<<16)
		if err != nil {
			return
		}
		msg, err := Decode(typ, payload)
		if err != nil {
			return
		}
		typ2, b, err := Encode(msg)
		if err != nil || typ2 != typ {
			t.Fatalf("re-encode %T: type %s→%s, %v", msg, typ, typ2, err)
		}
		var buf bytes.Buffer
		if err := WriteFrame(&buf, typ2, b); err != nil {
			t.Fatal(err)
		}
		typ3, p3, err := ReadFrame(&buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(typ3, p3)
		if err != nil {
			t.Fatalf("re-decode %s: %v", p3, err)
		}
		if !reflect.DeepEqual(normalize(t, back), normalize(t, msg)) {
			t.Fatalf("round trip changed %#v into %#v", msg, back)
		}
	})
}

// normalize re-encodes a message so that equal JSON compares equal (raw
// messages may differ in insignificant whitespace after a round trip).
func normalize(t *testing.T, m Message) string {
	_, b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
