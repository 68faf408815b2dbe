//go:build unix

package discovery

import (
	"errors"
	"syscall"
)

// pidAlive reports whether a process with this pid exists. EPERM means it
// exists but belongs to another user, so only ESRCH counts as gone.
func pidAlive(pid int) bool {
	if pid < 1 {
		return false
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
