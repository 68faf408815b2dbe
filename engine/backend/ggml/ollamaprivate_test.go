//go:build cgo

package ggml

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	ollamaggml "github.com/ollama/ollama/ml/backend/ggml"
)

// Every field ollamaprivate.go reads or writes is in ollama's types as
// pinned, of the type expected: a pin that moves or retypes one fails here,
// not when a model loads. No model is loaded; only ollama's types are read.
func TestOllamaPrivateFields(t *testing.T) {
	for _, f := range ollamaFields {
		if err := f.check(); err != nil {
			t.Error(err)
		}
	}
}

// What the unsafe code does with each field, stated apart from the
// ollamaFields table: a C pointer read as one word (and Tensor.t written
// as one), a slice of C pointers, a func cleared.
func TestOllamaPrivateFieldKinds(t *testing.T) {
	cases := []struct {
		f        ollamaField
		kind     reflect.Kind
		elem     string       // the cgo type pointed to, or the slice's element
		elemKind reflect.Kind // a slice's element's kind
	}{
		{tensorT, reflect.Pointer, "_Ctype_struct_ggml_tensor", 0},
		{tensorSync, reflect.Func, "", 0},
		{contextCtx, reflect.Pointer, "_Ctype_struct_ggml_context", 0},
		{backendSchedBackends, reflect.Slice, "_Ctype_ggml_backend_t", reflect.Pointer},
	}
	if len(cases) != len(ollamaFields) {
		t.Errorf("%d cases for the %d fields in ollamaFields", len(cases), len(ollamaFields))
	}
	for _, c := range cases {
		if !slices.Contains(ollamaFields, c.f) {
			t.Errorf("%s is not in ollamaFields", c.f)
		}
		sf, ok := c.f.owner.FieldByName(c.f.name)
		if !ok {
			t.Errorf("%s: no such field (Orrery expects a %s of %s)", c.f, c.kind, c.elem)
			continue
		}
		if sf.Type.Kind() != c.kind {
			t.Errorf("%s is a %s (%s), Orrery expects a %s", c.f, sf.Type.Kind(), sf.Type, c.kind)
			continue
		}
		if c.elem == "" {
			continue
		}
		e := sf.Type.Elem()
		if e.Name() != c.elem {
			t.Errorf("%s's element is %s, Orrery expects %s", c.f, e, c.elem)
		}
		if c.elemKind != 0 && e.Kind() != c.elemKind {
			t.Errorf("%s's element %s is a %s, Orrery expects a %s", c.f, e, e.Kind(), c.elemKind)
		}
	}
}

// ollamaTensorLike copies a Tensor whole: a field ollama adds to Tensor
// must be looked at before the copy is trusted with it.
func TestOllamaTensorFields(t *testing.T) {
	typ := reflect.TypeFor[ollamaggml.Tensor]()
	var got []string
	for i := range typ.NumField() {
		got = append(got, typ.Field(i).Name)
	}
	if !slices.Equal(got, tensorFields) {
		t.Errorf("%s.%s has fields %v, Orrery's ollamaTensorLike was written for %v", typ.PkgPath(), typ.Name(), got, tensorFields)
	}
}

// The accessors on ollama's zero values: nil C pointers are refused, a
// pointer set is read back, a copy takes the new C tensor and drops sync
// without touching the original, and a struct of another type is refused.
func TestOllamaAccessors(t *testing.T) {
	if _, err := ollamaContextC(&ollamaggml.Context{}); err == nil || !strings.Contains(err.Error(), "ctx is nil") {
		t.Errorf("a Context with no C context: %v", err)
	}
	bes, err := ollamaSchedBackends(&ollamaggml.Backend{})
	if err != nil || len(bes) != 0 {
		t.Errorf("a Backend with no backends: %v, %v", bes, err)
	}

	orig := &ollamaggml.Tensor{}
	if _, err := ollamaTensorC(orig); err == nil || !strings.Contains(err.Error(), "t is nil") {
		t.Errorf("a Tensor with no C tensor: %v", err)
	}
	// Stand-ins for C tensors: only their addresses are compared.
	a, b := unsafe.Pointer(new(int64)), unsafe.Pointer(new(int64))
	if err := setOllamaTensorC(orig, a); err != nil {
		t.Fatal(err)
	}
	if p, err := ollamaTensorC(orig); err != nil || p != a {
		t.Errorf("Tensor.t read back as %p, %v; set %p", p, err, a)
	}
	sync, err := tensorSync.in(orig)
	if err != nil {
		t.Fatal(err)
	}
	reflect.NewAt(sync.Type(), unsafe.Pointer(sync.UnsafeAddr())).Elem().Set(reflect.ValueOf(func() {}))

	cp, err := ollamaTensorLike(orig, b)
	if err != nil {
		t.Fatal(err)
	}
	if cp == orig {
		t.Fatal("ollamaTensorLike returned the original")
	}
	if p, _ := ollamaTensorC(cp); p != b {
		t.Errorf("the copy's C tensor is %p, want %p", p, b)
	}
	if s, _ := tensorSync.in(cp); !s.IsNil() {
		t.Error("the copy kept the original's sync")
	}
	if p, _ := ollamaTensorC(orig); p != a {
		t.Errorf("the original's C tensor became %p, want %p", p, a)
	}
	if s, _ := tensorSync.in(orig); s.IsNil() {
		t.Error("the original's sync was cleared")
	}

	other := &struct{ t unsafe.Pointer }{a}
	if _, err := tensorT.in(other); err == nil {
		t.Errorf("%T passed for ollama's Tensor", other)
	}
}
