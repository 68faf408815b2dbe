//go:build !cgo

package ggml

// Without cgo there is no graph to run; this file only lets the package
// type-check (make darwin-vet builds with CGO_ENABLED=0).

import (
	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/backend"
)

type tpGroup struct{}

func newTPGroup(backend.Collective) *tpGroup { return nil }
func (*tpGroup) close()                      {}
func (*tpGroup) take() error                 { return nil }
func (*tpGroup) reduce([]float32, bool)      {}

func (r *Rank) allReduce(ml.Context, ml.Tensor, bool) ml.Tensor {
	panic("tensor parallelism needs cgo")
}

func groupOp(ml.Context, ml.Tensor, *tpGroup, bool) ml.Tensor {
	panic("tensor parallelism needs cgo")
}

func localExperts(ml.Context, ml.Tensor, ml.Tensor, int, int) (ml.Tensor, ml.Tensor) {
	panic("expert parallelism needs cgo")
}
