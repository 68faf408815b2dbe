// Package gpulibtest is the test kit for tests that compute on a GPU: it
// finds the GPU backends make gpu built, and skips a test without them,
// or fails it where they are required (make test and CI).
package gpulibtest

import (
	"os"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gpulib"
)

// Required reports whether tests that need the GPU backends or a device
// must fail without them rather than skip: gpulib.RequiredEnv is set (make
// test and CI set it).
func Required() bool { return os.Getenv(gpulib.RequiredEnv) != "" }

// Lib is the directory of the GPU backends make gpu built
// ($ORRERY_GPU_LIB): without it, the test skips naming make gpu-test, or
// fails where they are Required. It also fails when the directory's
// backends cannot load (the library's Problem).
func Lib(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv(gpulib.LibEnv)
	if dir == "" {
		Missing(tb, gpulib.LibEnv+" is not set: make gpu builds ggml's GPU backends into lib/ollama; make gpu-test and make test set it")
	}
	l := gpulib.Inspect(dir, gpulib.BuildOllama())
	if l.Problem != "" {
		tb.Fatalf("%s=%s: %s", gpulib.LibEnv, dir, l.Problem)
	}
	return dir
}

// Missing skips the test for why, or fails it where the GPU is Required:
// for a test that finds the backends but no device it needs.
func Missing(tb testing.TB, why string) {
	tb.Helper()
	if Required() {
		tb.Fatalf("%s (%s is set: a GPU test may not skip)", why, gpulib.RequiredEnv)
	}
	tb.Skip(why)
}
