package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"time"

	"github.com/orrery-cluster/orrery/internal/ident"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	msgs := []Message{
		&Hello{NodeID: "a", StartedAt: time.Unix(100, 0).UTC(), Version: "v1", PeerPort: 52417},
		&Heartbeat{NodeID: "a", Seq: 7, T1: 123, MasterID: "b", Term: 3, LastIdx: 41, StateHash: "abc", Members: []string{"a", "b"}},
		&ProbeAck{NodeID: "b", Seq: 7, T1: 123, T2: 130, T3: 131},
		&Submit{Events: []RawEvent{{Type: "NodeMemoryMeasured", Event: json.RawMessage(`{"nodeId":"a"}`)}}},
		&Events{MasterID: "b", Events: []IndexedEvent{{Idx: 5, Type: "X", Event: json.RawMessage(`{}`)}, {Idx: 6, Type: "Y", Event: json.RawMessage(`1`)}}},
		&Fetch{Since: 3},
		&Snapshot{MasterID: "b", LastIdx: 9, State: json.RawMessage(`{"lastEventAppliedIdx":9}`)},
		&RingStart{Bench: "r-1", Order: []string{"a", "b", "c"}, Size: 1 << 20, Rounds: 3},
		&RingReport{Bench: "r-1", From: "b", To: "c", Hops: []RingHop{{Round: 0, LatencyNs: 1500}}},
		&Hello{NodeID: "a", Purpose: "ring", StreamID: "r-1"},
		&TraceTask{Task: "r-1", Kind: "ring-bench", Ranks: []TraceRank{{Rank: 0, Node: "a"}, {Rank: 1, Node: "b"}}, Error: "x"},
		&TraceChunk{Task: "r-1", Rank: 1, Seq: 3, Final: true, Data: json.RawMessage(`{"spans":[]}`)},
	}
	for _, m := range msgs {
		typ, b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteFrame(&buf, typ, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range msgs {
		typ, payload, err := ReadFrame(&buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(typ, payload)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", typ, got, want)
		}
	}
	if _, _, err := ReadFrame(&buf, 0); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameLimits(t *testing.T) {
	hdr := func(n uint32) []byte { b := make([]byte, 4); binary.BigEndian.PutUint32(b, n); return b }
	if _, _, err := ReadFrame(bytes.NewReader(hdr(1<<31)), 0); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("2 GiB header: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(hdr(100)), 50); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("over a custom cap: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(hdr(0)), 0); !errors.Is(err, ErrEmptyFrame) {
		t.Errorf("empty frame: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(append(hdr(10), 1, 2)), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated body: %v", err)
	}
	if err := WriteFrame(io.Discard, TypeSnapshot, make([]byte, MaxFrame)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversized write: %v", err)
	}
}

func TestDecodeRefusesBadMessages(t *testing.T) {
	many := make([]string, MaxMembersPerMsg+1)
	for i := range many {
		many[i] = "n"
	}
	manyJSON, _ := json.Marshal(many)
	for _, tc := range []struct {
		t    Type
		in   string
		want string
	}{
		{TypeHello, `{"nodeId":""}`, "empty node id"},
		{TypeHello, `{"nodeId":"../x"}`, "not [A-Za-z0-9_-]"},
		{TypeHello, `{"nodeId":"a","peerPort":70000}`, "peer port"},
		{TypeHeartbeat, `{"nodeId":"a","members":` + string(manyJSON) + `}`, "members, limit"},
		{TypeHeartbeat, `{"nodeId":"a","masterId":"x y"}`, "master"},
		{TypeSubmit, `{"events":[]}`, "0 events"},
		{TypeSubmit, `{"events":[{"type":"","event":{}}]}`, "event type length"},
		{TypeEvents, `{"masterId":"m","events":[{"idx":1,"type":"a","event":{}},{"idx":3,"type":"a","event":{}}]}`, "breaks the run"},
		{TypeEvents, `{"masterId":"m","events":[{"idx":1,"type":"a"}]}`, "no payload"},
		{TypeFetch, `{"since":-4}`, "since"},
		{TypeSnapshot, `{"masterId":"m","lastIdx":1,"state":[1]}`, "not a JSON object"},
		{Type(99), `{}`, "unknown message type-99"},
		{TypeHello, `{"nodeId":"a","purpose":"Gossip!"}`, "not [a-z0-9-]"},
		{TypeHello, `{"nodeId":"a","purpose":"` + strings.Repeat("p", 33) + `"}`, "limit 32"},
		{TypeHello, `{"nodeId":"a","bench":"x"}`, "stream id on the control link"},
		{TypeHello, `{"nodeId":"a","purpose":"ring","bench":"../x"}`, "stream id"},
		{TypeRingStart, `{"bench":"a/b","order":["a","b"],"size":1,"rounds":1}`, "bench id"},
		{TypeRingStart, `{"bench":"r","order":["a"],"size":1,"rounds":1}`, "ring of 1 nodes"},
		{TypeRingStart, `{"bench":"r","order":["a","a"],"size":1,"rounds":1}`, "twice"},
		{TypeRingStart, `{"bench":"r","order":["a","b"],"size":67108865,"rounds":1}`, "payload"},
		{TypeRingStart, `{"bench":"r","order":["a","b"],"size":1,"rounds":101}`, "rounds"},
		{TypeRingReport, `{"bench":"r","from":"a","hops":[` + strings.Repeat(`{"round":0},`, 100) + `{"round":0}]}`, "hops, limit"},
		{TypeHeartbeat, `{"nodeId":"a","peers":[{"nodeId":"b","addr":""}]}`, "address length"},
		{TypeHello, `{"nodeId":`, "decode hello"},
		{TypeTraceTask, `{"task":"../x","ranks":[{"rank":0,"node":"a"}]}`, "trace id"},
		{TypeTraceChunk, `{"task":"","rank":0,"data":{}}`, "empty trace id"},
		{TypeTraceTask, `{"task":"t","ranks":[]}`, "0 ranks"},
		{TypeTraceTask, `{"task":"t","ranks":[{"rank":0,"node":"a"},{"rank":0,"node":"b"}]}`, "rank 0 twice"},
		{TypeTraceTask, `{"task":"t","ranks":[{"rank":1024,"node":"a"}]}`, "rank 1024"},
		{TypeTraceTask, `{"task":"t","kind":"` + strings.Repeat("k", 33) + `","ranks":[{"rank":0,"node":"a"}]}`, "kind is 33 bytes"},
		{TypeTraceChunk, `{"task":"t","rank":-1,"data":{}}`, "rank -1"},
		{TypeTraceChunk, `{"task":"t","rank":0,"seq":-2,"data":{}}`, "seq -2"},
		{TypeTraceChunk, `{"task":"t","rank":0,"data":[1]}`, "not a JSON object"},
		{TypeTraceChunk, `{"task":"t","rank":0,"data":{"a":"` + strings.Repeat("x", MaxTraceChunk) + `"}}`, "limit"},
	} {
		_, err := Decode(tc.t, []byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err = %v, want %q", tc.t, tc.in, err, tc.want)
		}
	}
	// Bad ids are ident's errors, whichever message carries them.
	for _, in := range []struct {
		t  Type
		in string
	}{{TypeHello, `{"nodeId":"a b"}`}, {TypeTraceTask, `{"task":"a/b","ranks":[{"rank":0,"node":"a"}]}`}, {TypeRingReport, `{"bench":"r","from":".."}`}} {
		if _, err := Decode(in.t, []byte(in.in)); !errors.Is(err, ident.ErrInvalid) {
			t.Errorf("%s %s: %v, want ident.ErrInvalid", in.t, in.in, err)
		}
	}
}
