//go:build unix

package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The loopback dir must be this user's own: a link and another user's
// directory are refused; one of ours open to others is closed.
func TestLoopbackDirIsOwn(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777) // past the umask
	mustNew(t, loopbackConfig(t, open, "a", 7001))
	if fi, err := os.Stat(open); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("a loopback dir of ours open to others: mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	if _, err := New(loopbackConfig(t, link, "a", 7001)); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("New with a link as loopback dir: %v, want it refused", err)
	}
	// Another user's: as root, a directory given away; otherwise the
	// root directory, which is root's.
	theirs := "/"
	if os.Getuid() == 0 {
		theirs = filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(theirs, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(loopbackConfig(t, theirs, "a", 7001)); err == nil || !strings.Contains(err.Error(), "belongs to user") {
		t.Errorf("New with another user's loopback dir %s: %v, want it refused", theirs, err)
	}
}
