package gguf

import (
	"reflect"
	"testing"
)

// With replaces a key's value or appends the key, in a copy: the original
// keeps its values and answers Get as before, the copy answers the new
// value though the original had indexed its keys.
func TestWith(t *testing.T) {
	f := &File{Version: 3, Alignment: 64, KV: []KV{{Key: "a", Value: uint32(1)}, {Key: "b", Value: "x"}}}
	if v, _ := f.Get("a"); v != uint32(1) { // builds f's index
		t.Fatalf("Get(a) = %v", v)
	}
	g := f.With("a", uint32(2)).With("c", true)
	want := []KV{{Key: "a", Value: uint32(2)}, {Key: "b", Value: "x"}, {Key: "c", Value: true}}
	if !reflect.DeepEqual(g.KV, want) || g.Version != 3 || g.Alignment != 64 {
		t.Errorf("copy %+v, want KV %v, version 3, alignment 64", g, want)
	}
	if v, ok := g.Get("c"); !ok || v != true {
		t.Errorf("copy's Get(c) = %v, %v", v, ok)
	}
	if v, _ := f.Get("a"); v != uint32(1) || len(f.KV) != 2 {
		t.Errorf("original changed: Get(a) = %v, %d keys", v, len(f.KV))
	}
	if _, ok := f.Get("c"); ok {
		t.Error("original has c")
	}
}
