package macos

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// kIOMainPortDefault (formerly kIOMasterPortDefault) is MACH_PORT_NULL.
const ioMainPortDefault = 0

type ioKitAPI struct {
	serviceMatching               func(name string) CFRef
	serviceGetMatchingService     func(mainPort uint32, matching CFRef) uint32
	registryEntryCreateCFProperty func(entry uint32, key CFRef, alloc uintptr, options uint32) CFRef
	objectRelease                 func(obj uint32) int32
	serviceOpen                   func(service, owningTask, typ uint32, conn *uint32) int32
	serviceClose                  func(conn uint32) int32
	connectCallStructMethod       func(conn, selector uint32, in unsafe.Pointer, inSize uintptr, out unsafe.Pointer, outSize *uintptr) int32
}

// ioKitHandle is shared by the core IOKit bindings and the HID ones, which
// are loaded separately so missing private HID symbols don't cost us the
// registry.
var ioKitHandle = sync.OnceValues(func() (uintptr, error) {
	if _, err := loadCF(); err != nil {
		return 0, err
	}
	return openLib(pathIOKit)
})

var loadIOKit = sync.OnceValues(func() (*ioKitAPI, error) {
	h, err := ioKitHandle()
	if err != nil {
		return nil, err
	}
	a := &ioKitAPI{}
	err = bindAll(h, "IOKit", []binding{
		{&a.serviceMatching, "IOServiceMatching"},
		{&a.serviceGetMatchingService, "IOServiceGetMatchingService"},
		{&a.registryEntryCreateCFProperty, "IORegistryEntryCreateCFProperty"},
		{&a.objectRelease, "IOObjectRelease"},
		{&a.serviceOpen, "IOServiceOpen"},
		{&a.serviceClose, "IOServiceClose"},
		{&a.connectCallStructMethod, "IOConnectCallStructMethod"},
	})
	if err != nil {
		return nil, err
	}
	return a, nil
})

// machTaskSelf reads the mach_task_self_ global from libSystem; the C
// mach_task_self() is a macro over it.
var machTaskSelf = sync.OnceValues(func() (uint32, error) {
	// The variable lives in libsystem_kernel, which libSystem re-exports;
	// fall back to a global lookup in case the handle search misses it.
	var addr uintptr
	h, err := openLib(pathLibSystem)
	if err == nil {
		addr, err = dataSymbol(h, "libSystem", "mach_task_self_")
	}
	if err != nil {
		if addr, err = dataSymbol(purego.RTLD_DEFAULT, "libSystem", "mach_task_self_"); err != nil {
			return 0, err
		}
	}
	port := loadUint32(addr)
	if port == 0 {
		return 0, fmt.Errorf("macos: mach_task_self_ is MACH_PORT_NULL")
	}
	return port, nil
})

// matchingService returns the first IOService of class name; the caller
// must IOObjectRelease it.
func matchingService(io *ioKitAPI, class string) (uint32, error) {
	matching := io.serviceMatching(class)
	if matching == 0 {
		return 0, fmt.Errorf("macos: IOServiceMatching(%q) failed", class)
	}
	// IOServiceGetMatchingService consumes the matching dictionary.
	svc := io.serviceGetMatchingService(ioMainPortDefault, matching)
	if svc == 0 {
		return 0, fmt.Errorf("macos: no IOService %q", class)
	}
	return svc, nil
}

// RegistryProperty returns an owned copy of property key of the first
// IOService of class (e.g. "IOPlatformExpertDevice"). Release it.
func RegistryProperty(class, key string) (CFRef, error) {
	io, err := loadIOKit()
	if err != nil {
		return 0, err
	}
	svc, err := matchingService(io, class)
	if err != nil {
		return 0, err
	}
	defer io.objectRelease(svc)
	k, err := NewString(key)
	if err != nil {
		return 0, err
	}
	defer Release(k)
	v := io.registryEntryCreateCFProperty(svc, k, 0, 0)
	if v == 0 {
		return 0, fmt.Errorf("macos: %s has no property %q", class, key)
	}
	return v, nil
}

// RegistryString is RegistryProperty for string-valued properties.
func RegistryString(class, key string) (string, error) {
	v, err := RegistryProperty(class, key)
	if err != nil {
		return "", err
	}
	defer Release(v)
	s := GoString(v)
	if s == "" {
		return "", fmt.Errorf("macos: %s.%s is empty or not a string", class, key)
	}
	return s, nil
}
