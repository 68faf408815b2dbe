package grammar

import (
	"errors"
	"fmt"
	"math"
)

// frame is one entry of a parse stack: the position of the next element
// to match. Stacks are immutable linked lists, so that the stacks of a
// state share their tails; nil is the empty stack, which accepts.
type frame struct {
	pos  int32
	next *frame
}

// Limits on a parse state, so that an ambiguous grammar cannot blow up.
const (
	maxStacks = 4096
	maxDepth  = 1024
)

// Matcher is one generation's parse state. It is not safe for concurrent
// use.
type Matcher struct {
	g      *Grammar
	v      *Vocab
	stacks []*frame
	// scratch for Mask
	allowed []bool
}

// NewMatcher starts matching g from its start symbol, with the tokens of
// v.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v}
	m.stacks = g.expand(nil, &frame{pos: g.rules[g.root][0]}, 0)
	return m
}

// expand appends to out the stacks f leads to whose top is a byte set,
// or the empty stack (nil) where f can end: rule references are replaced
// by their alternatives, finished alternatives popped.
func (g *Grammar) expand(out []*frame, f *frame, depth int) []*frame {
	if depth > maxDepth || len(out) >= maxStacks {
		return out
	}
	if f == nil {
		return appendStack(out, nil)
	}
	e := g.elems[f.pos]
	switch e.kind {
	case kEnd:
		return g.expand(out, f.next, depth+1)
	case kSet:
		return appendStack(out, f)
	}
	// A reference: the continuation after it, then each alternative (a
	// reference last in its alternative leaves no frame behind).
	cont := f.next
	if g.elems[f.pos+1].kind != kEnd {
		cont = &frame{pos: f.pos + 1, next: f.next}
	}
	for _, a := range g.rules[e.ref] {
		out = g.expand(out, &frame{pos: a, next: cont}, depth+1)
	}
	return out
}

// appendStack adds f unless an equal stack is there already (same top
// and same tail: the duplicates an ambiguous grammar makes).
func appendStack(out []*frame, f *frame) []*frame {
	for _, o := range out {
		if o == f || o != nil && f != nil && o.pos == f.pos && o.next == f.next {
			return out
		}
	}
	return append(out, f)
}

// step advances stacks by byte c.
func (g *Grammar) step(stacks []*frame, c byte) []*frame {
	var out []*frame
	for _, f := range stacks {
		if f == nil || !g.elems[f.pos].set.has(c) {
			continue
		}
		next := f.next // the alternative ends: pop
		if g.elems[f.pos+1].kind != kEnd {
			next = &frame{pos: f.pos + 1, next: f.next}
		}
		out = g.expand(out, next, 0)
	}
	return out
}

func accepting(stacks []*frame) bool {
	for _, f := range stacks {
		if f == nil {
			return true
		}
	}
	return false
}

// Accepting reports whether the output so far is a whole sentence of the
// grammar (so that generation may end here).
func (m *Matcher) Accepting() bool { return accepting(m.stacks) }

// Done reports whether the output is complete and nothing may follow.
func (m *Matcher) Done() bool { return len(m.stacks) == 1 && m.stacks[0] == nil }

// Allowed reports whether token id may come next.
func (m *Matcher) Allowed(id int32) bool {
	if m.v.eog(id) {
		return m.Accepting()
	}
	b := m.v.bytes(id)
	if len(b) == 0 {
		return false
	}
	st := m.stacks
	for _, c := range b {
		if st = m.g.step(st, c); len(st) == 0 {
			return false
		}
	}
	return true
}

// ErrDeadEnd is returned when no token of the vocabulary can continue the
// output.
var ErrDeadEnd = errors.New("grammar: no token of the vocabulary can continue the output")

// Mask sets the logits of the tokens that may not come next to -Inf.
func (m *Matcher) Mask(logits []float32) error {
	n := min(len(logits), m.v.Len())
	if cap(m.allowed) < n {
		m.allowed = make([]bool, n)
	}
	allowed := m.allowed[:n]
	clear(allowed)
	m.v.walk(m.g, m.stacks, allowed)
	if m.Accepting() {
		for _, id := range m.v.eogs {
			if int(id) < n {
				allowed[id] = true
			}
		}
	}
	any := false
	for i := range logits {
		if i >= n || !allowed[i] {
			logits[i] = float32(math.Inf(-1))
		} else {
			any = true
		}
	}
	if !any {
		return ErrDeadEnd
	}
	return nil
}

// Accept advances the state past token id, which must be allowed.
func (m *Matcher) Accept(id int32) error {
	if m.v.eog(id) {
		if !m.Accepting() {
			return fmt.Errorf("grammar: end of generation (token %d) before the output is complete", id)
		}
		m.stacks = []*frame{nil}
		return nil
	}
	st := m.stacks
	for _, c := range m.v.bytes(id) {
		if st = m.g.step(st, c); len(st) == 0 {
			return fmt.Errorf("grammar: token %d (%q) does not continue the output", id, m.v.bytes(id))
		}
	}
	m.stacks = st
	return nil
}

// AcceptText advances the state past s (text already in the output, such
// as a forced prefix).
func (m *Matcher) AcceptText(s string) error {
	st := m.stacks
	for i := range len(s) {
		if st = m.g.step(st, s[i]); len(st) == 0 {
			return fmt.Errorf("grammar: %q does not match at byte %d", s, i)
		}
	}
	m.stacks = st
	return nil
}
