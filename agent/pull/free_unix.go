//go:build unix

package pull

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged user may still write in dir.
func freeBytes(dir string) (uint64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return 0, err
	}
	return s.Bavail * uint64(s.Bsize), nil
}
