//go:build cgo

package ggml

// The Go side of allreduce.go's custom op. A file with //export may only
// declare in its preamble, so the op's C code lives in allreduce.go.

/*
#include <stdint.h>
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

//export orreryAllReduce
func orreryAllReduce(h C.uintptr_t, data *C.float, n C.int64_t) {
	g := cgo.Handle(h).Value().(*tpGroup)
	g.reduce(unsafe.Slice((*float32)(unsafe.Pointer(data)), int(n)), false)
}
