//go:build !cgo

package ggml

// Without cgo nothing is repacked; this file only lets the package
// type-check (make darwin-vet builds with CGO_ENABLED=0).

import (
	"errors"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

type repacker struct{}

func newRepacker(int) *repacker        { return nil }
func repackable(gguf.TensorInfo) bool  { return false }
func (*repacker) move(ml.Tensor) error { return errors.New("repacking needs cgo") }
func (r *repacker) close()             {}
