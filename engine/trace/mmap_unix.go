//go:build unix

package trace

import (
	"io"
	"os"
	"syscall"
)

// mapFile maps f (size bytes, read from its start) read-only. The trace
// store writes files whole and renames them into place, so a mapped file
// is never cut short under the reader.
func mapFile(f *os.File, size int64) ([]byte, func(), bool) {
	if off, err := f.Seek(0, io.SeekCurrent); err != nil || off != 0 || size <= 0 || int64(int(size)) != size {
		return nil, nil, false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil, false
	}
	var data []byte
	var merr error
	if err := rc.Control(func(fd uintptr) {
		data, merr = syscall.Mmap(int(fd), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	}); err != nil || merr != nil {
		return nil, nil, false
	}
	return data, func() { syscall.Munmap(data) }, true
}
