package macos

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Framework paths. dlopen resolves these from the dyld shared cache on
// macOS 11+, where the files themselves no longer exist on disk.
const (
	pathCoreFoundation      = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
	pathIOKit               = "/System/Library/Frameworks/IOKit.framework/IOKit"
	pathSystemConfiguration = "/System/Library/Frameworks/SystemConfiguration.framework/SystemConfiguration"
	pathIOReport            = "/usr/lib/libIOReport.dylib"
	pathLibSystem           = "/usr/lib/libSystem.B.dylib"
)

// ErrUnavailable wraps every failure to load a framework or symbol, so
// callers can tell "not on this machine" from a failed call.
var ErrUnavailable = errors.New("macos: framework unavailable")

// binding names one C function and the Go func variable it is bound to.
type binding struct {
	fptr any
	name string
}

// openLib dlopens path. RTLD_LAZY because we bind each symbol explicitly.
func openLib(path string) (uintptr, error) {
	h, err := purego.Dlopen(path, purego.RTLD_LAZY|purego.RTLD_GLOBAL)
	if err != nil {
		return 0, fmt.Errorf("%w: dlopen %s: %v", ErrUnavailable, path, err)
	}
	return h, nil
}

// bindAll resolves every symbol first with Dlsym, so a missing one is an
// error rather than RegisterLibFunc's panic; the recover guards against a
// func type purego rejects.
func bindAll(handle uintptr, lib string, bs []binding) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: binding %s: %v", ErrUnavailable, lib, r)
		}
	}()
	syms := make([]uintptr, len(bs))
	for i, b := range bs {
		sym, err := purego.Dlsym(handle, b.name)
		if err != nil || sym == 0 {
			return fmt.Errorf("%w: %s: symbol %s missing", ErrUnavailable, lib, b.name)
		}
		syms[i] = sym
	}
	for i, b := range bs {
		purego.RegisterFunc(b.fptr, syms[i])
	}
	return nil
}

// dataSymbol returns the address of a global variable exported by handle.
func dataSymbol(handle uintptr, lib, name string) (uintptr, error) {
	sym, err := purego.Dlsym(handle, name)
	if err != nil || sym == 0 {
		return 0, fmt.Errorf("%w: %s: symbol %s missing", ErrUnavailable, lib, name)
	}
	return sym, nil
}

// loadUint32 reads a uint32 at a C address. The double indirection keeps
// go vet's unsafeptr check quiet: the address is OS memory, not Go heap.
func loadUint32(addr uintptr) uint32 {
	return **(**uint32)(unsafe.Pointer(&addr))
}
