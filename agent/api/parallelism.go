package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Parallelism is how POST /instance splits a model over its nodes:
// "pipeline" (each node a range of blocks; the default), "tensor" (each
// node a slice of every block, all computing each token together), or
// {"pipeline": P, "tensor": T}, or "auto": the plan the cost model
// predicts fastest from the nodes' measured speed and links
// (docs/cost-model.md). Loading on demand uses "auto".
type Parallelism struct {
	// Auto chooses the plan.
	Auto     bool `json:"-"`
	Pipeline int  `json:"pipeline,omitempty"`
	// Tensor is the tensor-parallel degree; -1 for "tensor": every node
	// the placement uses.
	Tensor int `json:"tensor,omitempty"`
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
			*p = Parallelism{Pipeline: 1, Tensor: -1}
		case "auto":
			*p = Parallelism{Auto: true}
		default:
			return fmt.Errorf(`parallelism %q: want "auto", "pipeline", "tensor" or {"pipeline": P, "tensor": T}`, s)
		}
		return nil
	}
	type plain Parallelism
	var v plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf(`parallelism: %w (want "auto", "pipeline", "tensor" or {"pipeline": P, "tensor": T})`, err)
	}
	if v.Pipeline < 0 || v.Tensor < 0 {
		return fmt.Errorf("parallelism %+v: negative", v)
	}
	*p = Parallelism(v)
	return nil
}

// MarshalJSON writes "auto", "tensor" for every node, else the object.
func (p Parallelism) MarshalJSON() ([]byte, error) {
	if p.Auto {
		return []byte(`"auto"`), nil
	}
	if p.Tensor == -1 {
		return []byte(`"tensor"`), nil
	}
	type plain Parallelism
	return json.Marshal(plain(p))
}

// TensorParallel reports whether p asks for a tensor-parallel group.
func (p *Parallelism) TensorParallel() bool {
	return p != nil && !p.Auto && (p.Tensor > 1 || p.Tensor == -1)
}
