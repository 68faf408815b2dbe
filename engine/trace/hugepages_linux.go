//go:build linux

package trace

import (
	"syscall"
	"unsafe"
)

// hugePages asks the kernel to back the memory of a large new slice with
// huge pages when it is first touched (THP in madvise mode): a million
// spans otherwise cost tens of thousands of page faults, which dominate a
// first load on some virtual machines. Best effort: errors are ignored.
func hugePages[T any](s []T) {
	var zero T
	size := uintptr(cap(s)) * unsafe.Sizeof(zero)
	if size < 4<<20 {
		return
	}
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	lo, hi := (start+huge-1)&^(huge-1), (start+size)&^(huge-1)
	if hi <= lo {
		return
	}
	syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, 14 /* MADV_HUGEPAGE */)
}
