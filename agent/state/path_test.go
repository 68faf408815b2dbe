package state

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{"", nil, false},
		{"/", nil, false},
		{"nodeMemory", []string{"nodeMemory"}, false},
		{"nodeMemory/abc-1", []string{"nodeMemory", "abc-1"}, false},
		{"/topology/nodes/0/", []string{"topology", "nodes", "0"}, false},
		{"a//b", nil, true},
		{"a/../b", nil, true},
		{"a/./b", nil, true},
		{"a/b c", nil, true},
		{"a/%2e", nil, true},
		{"a/\x00", nil, true},
		{strings.Repeat("a/", MaxPathSegments) + "a", nil, true},
		{strings.Repeat("x", MaxPathLen+1), nil, true},
	} {
		got, err := ParsePath(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrBadPath) {
				t.Errorf("ParsePath(%q) = %v, %v; want ErrBadPath", tc.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestLookup(t *testing.T) {
	s := New()
	for _, ev := range sampleEvents("n1") {
		s = Apply(s, ev)
	}
	big := uint64(1)<<60 + 1 // beyond float64's exact range
	s = Apply(s, NodeMemoryMeasured{NodeID: "n2", Memory: NodeMemory{RAMTotal: Bytes(big)}})

	get := func(p string) (string, error) {
		segs, err := ParsePath(p)
		if err != nil {
			return "", err
		}
		raw, err := Lookup(s, segs)
		return string(raw), err
	}
	if got, err := get("nodeMemory/n2/ramTotal/inBytes"); err != nil || got != "1152921504606846977" {
		t.Errorf("big byte count = %s, %v", got, err)
	}
	got, err := get("nodeMemory/n1")
	if err != nil {
		t.Fatal(err)
	}
	var m NodeMemory
	if err := json.Unmarshal([]byte(got), &m); err != nil || m.RAMAvailable.InBytes != 100<<30 {
		t.Errorf("nodeMemory/n1 = %s (%v)", got, err)
	}
	if got, _ := get("topology/nodes/1/nodeId"); got != `"n2"` {
		t.Errorf("topology/nodes/1/nodeId = %s", got)
	}
	whole, _ := get("")
	direct, _ := json.Marshal(s)
	if whole != string(direct) {
		t.Error("empty path is not the whole state")
	}
	for _, p := range []string{"nope", "nodeMemory/zz", "nodeMemory/n1/ramTotal/inBytes/deeper", "topology/nodes/9", "topology/nodes/-1", "topology/nodes/x"} {
		if _, err := get(p); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", p, err)
		}
	}
}
