//go:build cgo

package ggml

/*
// The CGO_CFLAGS this package is compiled with are those ollama's ggml
// was compiled with in the same build, so they tell how ggml was built.
static int orrery_built_with_avx2(void) {
#ifdef __AVX2__
	return 1;
#else
	return 0;
#endif
}
*/
import "C"

import (
	"runtime"

	"golang.org/x/sys/cpu"
)

// BuildWarning says, when this x86 machine has AVX2 but ggml was compiled
// without it (a plain `go build`, without the Makefile's CGO_CFLAGS), that
// compute will be several times slower than it can be; "" otherwise.
func BuildWarning() string {
	if runtime.GOARCH != "amd64" || !cpu.X86.HasAVX2 || C.orrery_built_with_avx2() != 0 {
		return ""
	}
	return `ggml was compiled without AVX2 although this CPU has it: compute runs several times slower (3–9× measured). ` +
		`Build with make, or run eval "$(scripts/cgo-flags.sh --env)" before go build`
}
