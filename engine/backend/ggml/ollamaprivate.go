//go:build cgo

package ggml

// Orrery reaches below ollama's Go API in four places: the custom ops of
// the tensor-parallel all-reduce (allreduce.go) and of expert parallelism
// (localexperts.go) need the C context and tensors behind ollama's Context
// and Tensor; repacking (repack.go) swaps a weight's C tensor; the thread
// pool (threadpool.go) needs the CPU backends behind ollama's Backend.
// ollama keeps all of these in unexported fields, read here through
// reflect and unsafe, and only here: each accessor below names the field
// it uses, and the fields' expectations are the ollamaFields table, which
// ollamaprivate_test.go checks against ollama's types. A new ollama pin
// that moves or retypes one of them fails `go test`, not a model's load.
//
// Each accessor checks the field again at run time, and its value's type:
// a failure is an error, never a write through a field of another type.
// The C types are ollama's package's own cgo types (_Ctype_…); Orrery's C
// types of the same names are distinct Go types, so the pointers cross as
// unsafe.Pointer.
//
// Without cgo ollama's ggml package has no Tensor, Context or Backend, and
// none of this file's callers is built: there is no counterpart.

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/ollama/ollama/ml"
	ollamaggml "github.com/ollama/ollama/ml/backend/ggml"
)

// ollamaField is one unexported field of a struct of ollama's ggml package
// that Orrery reads or writes, with the type Orrery expects it to have.
type ollamaField struct {
	owner reflect.Type // ollama's struct (not the pointer to it)
	name  string
	// typ is the field's type as reflect.Type.String writes it (ollama's
	// package is named ggml); a pointer's or a slice's element must be a
	// type of ollama's package itself, and a slice's elements pointers.
	typ string
}

var (
	// tensorT is ollama's Tensor.t, *C.struct_ggml_tensor: the C tensor
	// the custom ops take as input (allReduce, localExperts), repack
	// copies and replaces, and ollamaTensorLike replaces in a copy.
	tensorT = ollamaField{reflect.TypeFor[ollamaggml.Tensor](), "t", "*ggml._Ctype_struct_ggml_tensor"}
	// tensorSync is ollama's Tensor.sync, func(): set on the tensors a
	// computation returns, it waits for that computation before their
	// bytes are read. A custom op's result is a new node of the graph
	// being built, with nothing to wait for yet: ollamaTensorLike clears it.
	tensorSync = ollamaField{reflect.TypeFor[ollamaggml.Tensor](), "sync", "func()"}
	// contextCtx is ollama's Context.ctx, *C.struct_ggml_context: the C
	// context the custom ops' nodes are made in.
	contextCtx = ollamaField{reflect.TypeFor[ollamaggml.Context](), "ctx", "*ggml._Ctype_struct_ggml_context"}
	// backendSchedBackends is ollama's Backend.schedBackends,
	// []C.ggml_backend_t: the backends its scheduler computes on, among
	// them the process's one CPU backend, whose thread count and pool
	// each rank binds (threadpool.go).
	backendSchedBackends = ollamaField{reflect.TypeFor[ollamaggml.Backend](), "schedBackends", "[]ggml._Ctype_ggml_backend_t"}
)

// ollamaFields is every field of ollama's that this file reads or writes.
var ollamaFields = []ollamaField{tensorT, tensorSync, contextCtx, backendSchedBackends}

// tensorFields are all of ollama's Tensor's fields: ollamaTensorLike copies
// a Tensor whole, which is right for these (b, the backend, is shared) but
// must be thought over again for a field ollama adds.
var tensorFields = []string{"b", "t", "sync"}

// String names the field as the messages do: ollama's package, its type
// and the field.
func (f ollamaField) String() string {
	return f.owner.PkgPath() + "." + f.owner.Name() + "." + f.name
}

// check reports whether ollama's type has the field, declared in it, of
// the type expected.
func (f ollamaField) check() error {
	sf, ok := f.owner.FieldByName(f.name)
	if !ok || len(sf.Index) != 1 {
		return fmt.Errorf("%s: no such field (Orrery expects one of type %s)", f, f.typ)
	}
	if got := sf.Type.String(); got != f.typ {
		return fmt.Errorf("%s is a %s, Orrery expects %s", f, got, f.typ)
	}
	if k := sf.Type.Kind(); k == reflect.Pointer || k == reflect.Slice {
		e := sf.Type.Elem()
		if e.PkgPath() != f.owner.PkgPath() {
			return fmt.Errorf("%s's element type %s is %q's, Orrery expects %q's C type", f, e, e.PkgPath(), f.owner.PkgPath())
		}
		if k == reflect.Slice && e.Kind() != reflect.Pointer {
			return fmt.Errorf("%s's elements are %s, Orrery expects C pointers", f, e.Kind())
		}
	}
	return nil
}

// in is the field f of x, which must be a pointer to f's owner; the value
// is addressable, so it can be read and written whatever its export.
func (f ollamaField) in(x any) (reflect.Value, error) {
	v := reflect.ValueOf(x)
	if v.Kind() != reflect.Pointer || v.Type().Elem() != f.owner || v.IsNil() {
		return reflect.Value{}, fmt.Errorf("%T is not a pointer to ollama's %s", x, f.owner)
	}
	if err := f.check(); err != nil {
		return reflect.Value{}, err
	}
	return v.Elem().FieldByName(f.name), nil
}

// cPointer is the C pointer in field f of x, which must not be nil.
func (f ollamaField) cPointer(x any) (unsafe.Pointer, error) {
	v, err := f.in(x)
	if err != nil {
		return nil, err
	}
	p := v.UnsafePointer()
	if p == nil {
		return nil, fmt.Errorf("%s is nil", f)
	}
	return p, nil
}

// ollamaTensorC is the C tensor (struct ggml_tensor *) behind t, one of
// ollama's Tensors: Tensor.t.
func ollamaTensorC(t ml.Tensor) (unsafe.Pointer, error) {
	return tensorT.cPointer(t)
}

// setOllamaTensorC points t, one of ollama's Tensors, at the C tensor p
// (struct ggml_tensor *) in place: Tensor.t. Every holder of t sees p
// from then on.
func setOllamaTensorC(t ml.Tensor, p unsafe.Pointer) error {
	v, err := tensorT.in(t)
	if err != nil {
		return err
	}
	*(*unsafe.Pointer)(unsafe.Pointer(v.UnsafeAddr())) = p
	return nil
}

// ollamaTensorLike is a copy of t, one of ollama's Tensors (with its
// backend), around the C tensor p (struct ggml_tensor *), a node of the
// graph being built: Tensor.t set, Tensor.sync cleared.
func ollamaTensorLike(t ml.Tensor, p unsafe.Pointer) (ml.Tensor, error) {
	if _, err := tensorT.in(t); err != nil {
		return nil, err
	}
	cp := *t.(*ollamaggml.Tensor) // in checked t's type
	if err := setOllamaTensorC(&cp, p); err != nil {
		return nil, err
	}
	s, err := tensorSync.in(&cp)
	if err != nil {
		return nil, err
	}
	reflect.NewAt(s.Type(), unsafe.Pointer(s.UnsafeAddr())).Elem().SetZero()
	return &cp, nil
}

// ollamaContextC is the C context (struct ggml_context *) behind c, one
// of ollama's Contexts: Context.ctx.
func ollamaContextC(c ml.Context) (unsafe.Pointer, error) {
	return contextCtx.cPointer(c)
}

// ollamaSchedBackends are the C backends (ggml_backend_t) that b, ollama's
// Backend, schedules its graphs on: Backend.schedBackends. An entry may be
// nil.
func ollamaSchedBackends(b ml.Backend) ([]unsafe.Pointer, error) {
	v, err := backendSchedBackends.in(b)
	if err != nil {
		return nil, err
	}
	out := make([]unsafe.Pointer, v.Len())
	for i := range out {
		out[i] = v.Index(i).UnsafePointer()
	}
	return out, nil
}
