// Package modeltest writes and reads generated model files for tests: the
// few lines every engine test that needs a model had a copy of.
package modeltest

import (
	"path/filepath"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// Generate writes a model generated with o to name in a new temporary
// directory and returns its path.
func Generate(tb testing.TB, name string, o model.GenOptions) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	if err := model.Generate(path, o); err != nil {
		tb.Fatalf("generate %s: %v", name, err)
	}
	return path
}

// Family is o for a model of family (model.ApplyFamily).
func Family(tb testing.TB, o model.GenOptions, family string) model.GenOptions {
	tb.Helper()
	o, err := model.ApplyFamily(o, family)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// Read reads the model file at path: its GGUF directory and its config.
func Read(tb testing.TB, path string) (*gguf.File, model.Config) {
	tb.Helper()
	f, err := gguf.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		tb.Fatalf("%s: %v", filepath.Base(path), err)
	}
	return f, cfg
}

// Tokenizer is the tokenizer of the model file at path.
func Tokenizer(tb testing.TB, path string) *tokenizer.Tokenizer {
	tb.Helper()
	f, err := gguf.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}
