package macos

import (
	"fmt"
	"sync"
	"unsafe"
)

// CFRef is any CoreFoundation object reference (CFTypeRef); 0 is NULL.
// Refs from Copy/Create functions are owned and must be Released; refs
// from Get functions are borrowed from their container.
type CFRef uintptr

// CoreFoundation constants from CFString.h and CFNumber.h.
const (
	cfStringEncodingUTF8 = 0x08000100
	cfNumberSInt32Type   = 3
	cfNumberSInt64Type   = 4
	cfNumberFloat64Type  = 6
)

type cfAPI struct {
	release                     func(CFRef)
	getTypeID                   func(CFRef) uint64
	stringGetTypeID             func() uint64
	numberGetTypeID             func() uint64
	stringCreateWithCString     func(alloc uintptr, cstr string, enc uint32) CFRef
	stringGetLength             func(CFRef) int64
	stringGetCString            func(s CFRef, buf *byte, size int64, enc uint32) uint8
	dictionaryGetValue          func(dict, key CFRef) CFRef
	dictionaryGetCount          func(CFRef) int64
	dictionaryCreate            func(alloc uintptr, keys, values *CFRef, n int64, kcb, vcb uintptr) CFRef
	dictionaryCreateMutableCopy func(alloc uintptr, capacity int64, dict CFRef) CFRef
	arrayGetCount               func(CFRef) int64
	arrayGetValueAtIndex        func(CFRef, int64) CFRef
	numberCreate                func(alloc uintptr, typ int64, value unsafe.Pointer) CFRef
	numberGetValue              func(n CFRef, typ int64, value unsafe.Pointer) uint8

	// Addresses of kCFTypeDictionaryKeyCallBacks / ValueCallBacks, which
	// CFDictionaryCreate takes by pointer.
	keyCallBacks, valueCallBacks uintptr
	stringTypeID, numberTypeID   uint64
}

// loadCF opens CoreFoundation once per process.
var loadCF = sync.OnceValues(func() (*cfAPI, error) {
	h, err := openLib(pathCoreFoundation)
	if err != nil {
		return nil, err
	}
	a := &cfAPI{}
	err = bindAll(h, "CoreFoundation", []binding{
		{&a.release, "CFRelease"},
		{&a.getTypeID, "CFGetTypeID"},
		{&a.stringGetTypeID, "CFStringGetTypeID"},
		{&a.numberGetTypeID, "CFNumberGetTypeID"},
		{&a.stringCreateWithCString, "CFStringCreateWithCString"},
		{&a.stringGetLength, "CFStringGetLength"},
		{&a.stringGetCString, "CFStringGetCString"},
		{&a.dictionaryGetValue, "CFDictionaryGetValue"},
		{&a.dictionaryGetCount, "CFDictionaryGetCount"},
		{&a.dictionaryCreate, "CFDictionaryCreate"},
		{&a.dictionaryCreateMutableCopy, "CFDictionaryCreateMutableCopy"},
		{&a.arrayGetCount, "CFArrayGetCount"},
		{&a.arrayGetValueAtIndex, "CFArrayGetValueAtIndex"},
		{&a.numberCreate, "CFNumberCreate"},
		{&a.numberGetValue, "CFNumberGetValue"},
	})
	if err != nil {
		return nil, err
	}
	if a.keyCallBacks, err = dataSymbol(h, "CoreFoundation", "kCFTypeDictionaryKeyCallBacks"); err != nil {
		return nil, err
	}
	if a.valueCallBacks, err = dataSymbol(h, "CoreFoundation", "kCFTypeDictionaryValueCallBacks"); err != nil {
		return nil, err
	}
	a.stringTypeID = a.stringGetTypeID()
	a.numberTypeID = a.numberGetTypeID()
	return a, nil
})

// LoadCoreFoundation reports whether CoreFoundation could be loaded.
func LoadCoreFoundation() error {
	_, err := loadCF()
	return err
}

// Release drops an owned reference; NULL is ignored (CFRelease(NULL) crashes).
func Release(ref CFRef) {
	if ref == 0 {
		return
	}
	if cf, err := loadCF(); err == nil {
		cf.release(ref)
	}
}

// NewString returns an owned CFString holding s.
func NewString(s string) (CFRef, error) {
	cf, err := loadCF()
	if err != nil {
		return 0, err
	}
	ref := cf.stringCreateWithCString(0, s, cfStringEncodingUTF8)
	if ref == 0 {
		return 0, fmt.Errorf("macos: CFStringCreateWithCString(%q) failed", s)
	}
	return ref, nil
}

// GoString copies a CFString into Go; it returns "" for NULL or a non-string.
func GoString(ref CFRef) string {
	cf, err := loadCF()
	if err != nil || ref == 0 || cf.getTypeID(ref) != cf.stringTypeID {
		return ""
	}
	n := cf.stringGetLength(ref)
	if n <= 0 {
		return ""
	}
	// One UTF-16 unit never needs more than 3 UTF-8 bytes (a surrogate
	// pair, two units, needs 4), plus the NUL.
	buf := make([]byte, 3*n+1)
	if cf.stringGetCString(ref, &buf[0], int64(len(buf)), cfStringEncodingUTF8) == 0 {
		return ""
	}
	for i, b := range buf {
		if b == 0 {
			return string(buf[:i])
		}
	}
	return string(buf)
}

// DictValue returns the borrowed value for a string key, or 0.
func DictValue(dict CFRef, key string) CFRef {
	cf, err := loadCF()
	if err != nil || dict == 0 {
		return 0
	}
	k, err := NewString(key)
	if err != nil {
		return 0
	}
	defer cf.release(k)
	return cf.dictionaryGetValue(dict, k)
}

// ArrayCount returns the element count of a CFArray (0 for NULL).
func ArrayCount(arr CFRef) int {
	cf, err := loadCF()
	if err != nil || arr == 0 {
		return 0
	}
	return int(cf.arrayGetCount(arr))
}

// ArrayValue returns the borrowed element i of a CFArray, or 0 when out of range.
func ArrayValue(arr CFRef, i int) CFRef {
	cf, err := loadCF()
	if err != nil || arr == 0 || i < 0 || int64(i) >= cf.arrayGetCount(arr) {
		return 0
	}
	return cf.arrayGetValueAtIndex(arr, int64(i))
}

// NumberInt64 reads a CFNumber as int64; ok is false for NULL or a non-number.
func NumberInt64(ref CFRef) (v int64, ok bool) {
	cf, err := loadCF()
	if err != nil || ref == 0 || cf.getTypeID(ref) != cf.numberTypeID {
		return 0, false
	}
	ok = cf.numberGetValue(ref, cfNumberSInt64Type, unsafe.Pointer(&v)) != 0
	return v, ok
}

// NumberFloat64 reads a CFNumber as float64; ok is false for NULL or a non-number.
func NumberFloat64(ref CFRef) (v float64, ok bool) {
	cf, err := loadCF()
	if err != nil || ref == 0 || cf.getTypeID(ref) != cf.numberTypeID {
		return 0, false
	}
	ok = cf.numberGetValue(ref, cfNumberFloat64Type, unsafe.Pointer(&v)) != 0
	return v, ok
}

// newInt32Dict builds an owned, immutable {string: SInt32} CFDictionary.
func newInt32Dict(m map[string]int32) (CFRef, error) {
	cf, err := loadCF()
	if err != nil {
		return 0, err
	}
	keys := make([]CFRef, 0, len(m))
	vals := make([]CFRef, 0, len(m))
	defer func() {
		// The dictionary retains its keys and values; drop our references.
		for _, r := range keys {
			cf.release(r)
		}
		for _, r := range vals {
			cf.release(r)
		}
	}()
	for k, v := range m {
		ks, err := NewString(k)
		if err != nil {
			return 0, err
		}
		keys = append(keys, ks)
		n := cf.numberCreate(0, cfNumberSInt32Type, unsafe.Pointer(&v))
		if n == 0 {
			return 0, fmt.Errorf("macos: CFNumberCreate failed")
		}
		vals = append(vals, n)
	}
	if len(keys) == 0 {
		return 0, fmt.Errorf("macos: empty dictionary")
	}
	d := cf.dictionaryCreate(0, &keys[0], &vals[0], int64(len(keys)), cf.keyCallBacks, cf.valueCallBacks)
	if d == 0 {
		return 0, fmt.Errorf("macos: CFDictionaryCreate failed")
	}
	return d, nil
}
