//go:build unix

package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A mapped file cut short under the reader is an error, not a crash.
func TestMappedFileCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.json")
	if err := os.WriteFile(path, make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, unmap, ok := mapFile(f, 1<<16)
	if !ok {
		t.Fatal("the file was not mapped")
	}
	defer unmap()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	l := &loader{mapped: true}
	var sum byte
	err = l.guard(func() error {
		for _, c := range data {
			sum += c
		}
		return nil
	})
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "changed while it was read") {
		t.Fatalf("reading a mapped file cut short: %v (sum %d)", err, sum)
	}
}
