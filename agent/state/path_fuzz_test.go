package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// FuzzParsePath checks that any URL path either parses into clean segments
// that re-join to an equivalent path, or fails with ErrBadPath; and that
// Lookup on a parsed path never fails with anything but ErrNotFound.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"", "nodeMemory", "nodeMemory/abc", "/a/b/", "a//b", "../x", "a/%00", "topology/nodes/0"} {
		f.Add(s)
	}
	st := New()
	for _, ev := range sampleEvents("n1") {
		st = Apply(st, ev)
	}
	f.Fuzz(func(t *testing.T, p string) {
		segs, err := ParsePath(p)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("ParsePath(%q): error not ErrBadPath: %v", p, err)
			}
			return
		}
		for _, s := range segs {
			if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\ \x00") {
				t.Fatalf("ParsePath(%q) let through segment %q", p, s)
			}
		}
		again, err := ParsePath(strings.Join(segs, "/"))
		if err != nil || strings.Join(again, "/") != strings.Join(segs, "/") {
			t.Fatalf("re-parse of %q: %q, %v", segs, again, err)
		}
		if _, err := Lookup(st, segs); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("Lookup(%q): %v", segs, err)
		}
	})
}

// FuzzIndexedEvent checks that the event decoder refuses bad frames with an
// error (never a panic), that whatever it accepts applies to a state
// without a panic and leaves no invalid id in it, and that it survives a
// round trip.
func FuzzIndexedEvent(f *testing.F) {
	f.Add([]byte(`{"idx":3,"type":"NodeMemoryMeasured","event":{"nodeId":"a","memory":{"ramTotal":{"inBytes":5}}}}`))
	f.Add([]byte(`{"idx":0,"type":"NodeIdentityMeasured","event":{"nodeId":"x","identity":{"perfCores":4}}}`))
	f.Add([]byte(`{"idx":1,"type":"Nope","event":{}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"idx":2,"type":"InstanceCreated","event":{"nodeId":"a","instance":{"instanceId":"i","nodeId":"a","ranks":[{"nodeId":"b","rank":0}]}}}`))
	f.Add([]byte(`{"idx":2,"type":"InstanceUsed","event":{"nodeId":"b","instanceId":"i","active":2,"keepAliveMs":-1}}`))
	f.Add([]byte(`{"idx":2,"type":"NodeStateAsserted","event":{"nodeId":"a","instances":[{"instanceId":"j","nodeId":"a","ranks":[{"nodeId":"a"}]}],"runners":[{"runnerId":"j-0","instanceId":"j","nodeId":"a"}]}}`))
	f.Add([]byte(`{"idx":2,"type":"NodeGone","event":{"nodeId":"b"}}`))
	base := Apply(New(), InstanceCreated{NodeID: "a", Instance: Instance{InstanceID: "i", NodeID: "a", Ranks: []ShardRange{{NodeID: "b"}}}})
	base = Apply(base, RunnerStatusChanged{NodeID: "b", Runner: Runner{RunnerID: "i-0", InstanceID: "i", NodeID: "b"}})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ie Indexed
		if err := ie.UnmarshalJSON(b); err != nil {
			return
		}
		if ie.Idx < 0 || ident.ValidNodeID(ie.Event.Node()) != nil {
			t.Fatalf("accepted bad event %+v", ie)
		}
		if err := Apply(base, ie.Event).CheckIDs(); err != nil {
			t.Fatalf("applying %+v left a bad id in the state: %v", ie.Event, err)
		}
		out, err := ie.MarshalJSON()
		if err != nil {
			t.Fatalf("marshal accepted event: %v", err)
		}
		var back Indexed
		if err := back.UnmarshalJSON(out); err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		out2, _ := back.MarshalJSON()
		if string(out) != string(out2) {
			t.Fatalf("round trip differs:\n%s\n%s", out, out2)
		}
	})
}
