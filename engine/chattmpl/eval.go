package chattmpl

import (
	"errors"
	"fmt"
	"strings"
)

// The renderer's state: render limits, variable scopes and the output buffer.
// Statements are executed in eval_stmt.go, expressions evaluated in
// eval_expr.go.

// Render limits: a template that hits one fails instead of running away.
const (
	maxOutput    = 8 << 20   // bytes of output
	maxSteps     = 1_000_000 // loop iterations, macro calls and filter items
	maxCallDepth = 200       // nested macro calls
	maxAlloc     = 256 << 20 // bytes of strings built by operators, filters and calls
)

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type scope struct {
	vars   map[string]any
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]any{}, parent: parent} }

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type renderer struct {
	out   *strings.Builder
	steps int
	depth int
	alloc int // bytes of strings built so far
}

type macro struct {
	def   *macroDef
	scope *scope // where it was defined
	r     *renderer
}

func (r *renderer) step() error {
	r.steps++
	if r.steps > maxSteps {
		return fmt.Errorf("template exceeded %d steps", maxSteps)
	}
	return nil
}

// built counts the strings an operation built against maxAlloc, so that a
// loop cannot copy megabytes a million times.
func (r *renderer) built(v any, err error) (any, error) {
	if s, ok := v.(string); ok && err == nil {
		r.alloc += len(s)
		if r.alloc > maxAlloc {
			return nil, fmt.Errorf("template built more than %d bytes of strings", maxAlloc)
		}
	}
	return v, err
}

func (r *renderer) write(s string) error {
	if r.out.Len()+len(s) > maxOutput {
		return fmt.Errorf("template output exceeded %d bytes", maxOutput)
	}
	if r.alloc += len(s); r.alloc > maxAlloc { // captured output counts too
		return fmt.Errorf("template built more than %d bytes of strings", maxAlloc)
	}
	r.out.WriteString(s)
	return nil
}

// capture renders nodes into a string.
func (r *renderer) capture(nodes []node, s *scope) (string, error) {
	old := r.out
	var b strings.Builder
	r.out = &b
	err := r.exec(nodes, s)
	r.out = old
	if err == nil && old.Len()+b.Len() > maxOutput {
		err = fmt.Errorf("template output exceeded %d bytes", maxOutput)
	}
	return b.String(), err
}
