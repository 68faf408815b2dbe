//go:build unix

package discovery

import (
	"fmt"
	"os"
	"syscall"
)

// ownDir checks that dir, the loopback records' directory, is this user's
// own: by default it sits in the shared temporary directory at a name
// anyone can guess, and another user who made it first could plant, swap
// or remove records in it. A directory of ours open to others is closed
// (0700); a link or another user's directory is refused.
func ownDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link; give a directory of your own", dir)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to user %d, not to you (%d); give a directory of your own", dir, st.Uid, os.Getuid())
	case fi.Mode().Perm()&0o077 != 0:
		return os.Chmod(dir, 0o700)
	}
	return nil
}
