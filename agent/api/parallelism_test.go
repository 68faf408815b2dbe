package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// Each accepted form reads as its plan and writes back as itself; the
// others are refused, naming what is wanted.
func TestParallelism(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Parallelism
		out  string
	}{
		{`"pipeline"`, Parallelism{}, `{}`},
		{`"tensor"`, Parallelism{EveryNode: true}, `"tensor"`},
		{`"auto"`, Parallelism{Auto: true}, `"auto"`},
		{`{"pipeline":1,"tensor":2}`, Parallelism{Pipeline: 1, Tensor: 2}, `{"pipeline":1,"tensor":2}`},
	} {
		var p Parallelism
		if err := json.Unmarshal([]byte(c.in), &p); err != nil || p != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.in, p, err, c.want)
			continue
		}
		if b, err := json.Marshal(p); err != nil || string(b) != c.out {
			t.Errorf("%s writes %s, %v; want %s", c.in, b, err, c.out)
		}
	}
	if p := (Parallelism{Auto: true}); p.TensorParallel() {
		t.Error("auto reads as tensor-parallel before it chose")
	}
	for _, bad := range []string{`"fastest"`, `{"tensor":-2}`, `{"tensors":2}`, `7`, `"auto`} {
		var p Parallelism
		err := json.Unmarshal([]byte(bad), &p)
		if err == nil {
			t.Errorf("%s taken as %+v", bad, p)
		} else if strings.HasPrefix(bad, `"f`) && !strings.Contains(err.Error(), `"auto"`) {
			t.Errorf("%s: %v does not name the choices", bad, err)
		}
	}
}

// Whatever the bytes, reading never panics, and what is read writes back
// to the same plan.
func FuzzParallelism(f *testing.F) {
	for _, s := range []string{`"auto"`, `"tensor"`, `"pipeline"`, `{"pipeline":2,"tensor":2}`, `{}`, `null`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Parallelism
		if err := json.Unmarshal(b, &p); err != nil {
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%q read as %+v, which does not write: %v", b, p, err)
		}
		var q Parallelism
		if err := json.Unmarshal(out, &q); err != nil || q != p {
			t.Fatalf("%q → %+v → %s → %+v, %v", b, p, out, q, err)
		}
	})
}

// A tensor-parallel request resolves to a shape once the nodes are
// known: "tensor" is one group of all of them.
func TestParallelismShape(t *testing.T) {
	for _, c := range []struct {
		p     Parallelism
		nodes int
		want  string // the shape, or the error's text
	}{
		{Parallelism{EveryNode: true}, 3, "tensor 3"},
		{Parallelism{Pipeline: 1, Tensor: 2}, 5, "tensor 2"},
		{Parallelism{Pipeline: 2, Tensor: 2}, 4, "pipeline 2 × tensor 2"},
		{Parallelism{Pipeline: 2}, 6, "pipeline 2 × tensor 3"},
		{Parallelism{EveryNode: true}, 1, "needs 2 nodes or more; this cluster offers 1"},
		{Parallelism{Pipeline: 1, Tensor: 17}, 17, "tensor-parallel groups of 17, want 1..16"},
	} {
		s, err := c.p.Shape(c.nodes)
		got := s.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%+v over %d nodes: %q, want %q", c.p, c.nodes, got, c.want)
		}
	}
}
