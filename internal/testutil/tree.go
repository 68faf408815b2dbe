package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteTree writes files (a path relative to the root, with its content)
// under a new temporary directory and returns the directory: a fake /proc,
// /sys or /etc for a reader under test.
func WriteTree(tb testing.TB, files map[string]string) string {
	tb.Helper()
	root := tb.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}
