// Package llamaref finds the llama.cpp reference that scripts/llama-ref.sh
// installs outside the repository (source, vocab test files, chat
// templates and the tools built against its prebuilt libraries), for the
// conformance tests.
package llamaref

import (
	"fmt"
	"os"
	"path/filepath"
)

// TB is the part of testing.TB that Require uses (so that the CLI, which
// also finds the reference, does not link the testing package).
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// Dir is the reference directory: $ORRERY_LLAMA_REF, or
// ~/.cache/orrery/llama-ref ($XDG_CACHE_HOME/orrery/llama-ref).
func Dir() string {
	if d := os.Getenv("ORRERY_LLAMA_REF"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "orrery", "llama-ref")
}

// Require returns the reference directory once the given paths (relative
// to it) all exist. Otherwise the test is skipped with a message saying how
// to install the reference; under CI (env CI set) it fails instead, since
// CI installs the reference first.
func Require(tb TB, paths ...string) string {
	tb.Helper()
	dir := Dir()
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			msg := fmt.Sprintf("llama.cpp reference: %s is missing (%v); run scripts/llama-ref.sh or make conformance", p, err)
			if os.Getenv("CI") != "" {
				tb.Fatal(msg)
			}
			tb.Skip(msg)
		}
	}
	return dir
}

// Bin is the path of a tool in the reference's bin/.
func Bin(dir, name string) string { return filepath.Join(dir, "bin", name) }
