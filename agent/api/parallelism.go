package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Parallelism is how POST /instance splits a model over its nodes:
// "pipeline" (each node a range of blocks; the default), "tensor" (each
// node a slice of every block, all computing each token together), or
// {"pipeline": P, "tensor": T}, or "auto": the plan the cost model
// predicts fastest from the nodes' measured speed and links
// (docs/cost-model.md). Loading on demand uses "auto".
type Parallelism struct {
	// Auto chooses the plan.
	Auto bool
	// EveryNode is "tensor": one tensor-parallel group of every node the
	// placement uses (Shape resolves it once they are known).
	EveryNode bool
	// Pipeline and Tensor are the object's counts (0: not given).
	Pipeline, Tensor int
}

// wireParallelism is the object form.
type wireParallelism struct {
	Pipeline int `json:"pipeline,omitempty"`
	Tensor   int `json:"tensor,omitempty"`
}

// ParallelismOf is the object form of s.
func ParallelismOf(s runnerapi.Shape) *Parallelism {
	return &Parallelism{Pipeline: s.Pipeline, Tensor: s.Tensor}
}

// UnmarshalJSON reads a name or an object.
func (p *Parallelism) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "pipeline":
			*p = Parallelism{}
		case "tensor":
			*p = Parallelism{EveryNode: true}
		case "auto":
			*p = Parallelism{Auto: true}
		default:
			return fmt.Errorf(`parallelism %q: want "auto", "pipeline", "tensor" or {"pipeline": P, "tensor": T}`, s)
		}
		return nil
	}
	var v wireParallelism
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf(`parallelism: %w (want "auto", "pipeline", "tensor" or {"pipeline": P, "tensor": T})`, err)
	}
	if v.Pipeline < 0 || v.Tensor < 0 {
		return fmt.Errorf("parallelism %+v: negative", v)
	}
	*p = Parallelism{Pipeline: v.Pipeline, Tensor: v.Tensor}
	return nil
}

// MarshalJSON writes "auto", "tensor" for every node, else the object.
func (p Parallelism) MarshalJSON() ([]byte, error) {
	switch {
	case p.Auto:
		return []byte(`"auto"`), nil
	case p.EveryNode:
		return []byte(`"tensor"`), nil
	}
	return json.Marshal(wireParallelism{Pipeline: p.Pipeline, Tensor: p.Tensor})
}

// TensorParallel reports whether p asks for tensor-parallel groups.
func (p *Parallelism) TensorParallel() bool {
	return p != nil && !p.Auto && (p.Tensor > 1 || p.EveryNode)
}

// ErrParallelism is wrapped by Shape's errors.
var ErrParallelism = errors.New("parallelism")

// Shape resolves a tensor-parallel request over nodes nodes: "tensor" is
// one group of all of them, {"pipeline": P, "tensor": T} P groups of T
// (P 0: one), and {"pipeline": P} with no tensor P groups sharing the
// nodes evenly.
func (p *Parallelism) Shape(nodes int) (runnerapi.Shape, error) {
	s := runnerapi.Shape{Pipeline: max(p.Pipeline, 1), Tensor: p.Tensor}
	if p.EveryNode || p.Tensor < 2 {
		s.Tensor = nodes / s.Pipeline
	}
	if s.Tensor < 2 {
		return s, fmt.Errorf("%w: a tensor-parallel group needs 2 nodes or more; this cluster offers %d", ErrParallelism, s.Tensor)
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%w: %v", ErrParallelism, err)
	}
	return s, nil
}
