//go:build unix

package app

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

func TestSingleInstance(t *testing.T) {
	dir := t.TempDir()
	var shown atomic.Int32
	first, err := AcquireInstance(dir, func() { shown.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	// A second launch: refused, and the first is asked to show itself.
	if _, err := AcquireInstance(dir, func() { t.Error("the second instance was asked to show") }); !errors.Is(err, ErrRunning) {
		t.Fatalf("second acquire: %v, want ErrRunning", err)
	}
	if n := shown.Load(); n != 1 {
		t.Fatalf("first instance shown %d times, want 1", n)
	}
	first.Close()

	// Released: the next launch is the instance, even over a socket file
	// a dead instance left behind.
	os.WriteFile(filepath.Join(dir, "desktop.sock"), nil, 0o600)
	again, err := AcquireInstance(dir, func() {})
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	again.Close()
}
