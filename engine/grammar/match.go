package grammar

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// frame is one entry of a parse stack: the position of the next element
// to match. Stacks are immutable linked lists, so that the stacks of a
// state share their tails; nil is the empty stack, which accepts. Frames
// are interned (one per position and tail), so equal stacks are the same
// pointer.
type frame struct {
	pos  int32
	id   int32
	next *frame
}

// state is a set of parse stacks, interned, with the states each byte
// leads to as they are found: a lazily built automaton, so that a state
// seen before (the inside of a string, say) costs one lookup per byte.
type state struct {
	stacks []*frame
	next   map[byte]*state
}

// Limits on a parse state, so that an ambiguous grammar cannot blow up,
// and on the memo (cleared when full).
const (
	maxStacks = 4096
	maxDepth  = 1024
	maxStates = 1 << 16
	maxFrames = 1 << 20
)

type frameKey struct {
	pos  int32
	next *frame
}

// Matcher is one generation's parse state. It is not safe for concurrent
// use.
type Matcher struct {
	g      *Grammar
	v      *Vocab
	cur    *state
	dead   *state
	frames map[frameKey]*frame
	states map[string]*state
	// lastID numbers frames; it never restarts, so that a frame made
	// before a reset of the memo never shares an id with one made after.
	lastID int32
	// memoStates bounds the memo (maxStates; tests lower it).
	memoStates int
	// scratch for Mask
	allowed []bool
}

// NewMatcher starts matching g from its start symbol, with the tokens of
// v.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v, dead: &state{next: map[byte]*state{}}, memoStates: maxStates}
	m.reset()
	m.cur = m.intern(m.expand(nil, m.mk(g.rules[g.root][0], nil), 0))
	return m
}

// reset empties the memo. States made before stay valid, but the current
// one forgets where bytes lead, so that the old automaton can be freed.
func (m *Matcher) reset() {
	m.frames = map[frameKey]*frame{}
	m.states = map[string]*state{}
	if m.cur != nil {
		m.cur.next = map[byte]*state{}
	}
}

// mk is the interned frame (pos, next).
func (m *Matcher) mk(pos int32, next *frame) *frame {
	k := frameKey{pos, next}
	if f := m.frames[k]; f != nil {
		return f
	}
	m.lastID++
	f := &frame{pos: pos, id: m.lastID, next: next}
	m.frames[k] = f
	return f
}

// intern is the state of stacks (which it may reorder).
func (m *Matcher) intern(stacks []*frame) *state {
	if len(stacks) == 0 {
		return m.dead
	}
	slices.SortFunc(stacks, func(a, b *frame) int { return int(fid(a) - fid(b)) })
	var sb strings.Builder
	for _, f := range stacks {
		sb.WriteString(strconv.Itoa(int(fid(f))))
		sb.WriteByte(',')
	}
	k := sb.String()
	if s := m.states[k]; s != nil {
		return s
	}
	s := &state{stacks: stacks, next: map[byte]*state{}}
	m.states[k] = s
	return s
}

func fid(f *frame) int32 {
	if f == nil {
		return 0
	}
	return f.id
}

// expand appends to out the stacks f leads to whose top is a byte set,
// or the empty stack (nil) where f can end: rule references are replaced
// by their alternatives, finished alternatives popped.
func (m *Matcher) expand(out []*frame, f *frame, depth int) []*frame {
	if depth > maxDepth || len(out) >= maxStacks {
		return out
	}
	if f == nil {
		return appendStack(out, nil)
	}
	g := m.g
	e := g.elems[f.pos]
	switch e.kind {
	case kEnd:
		return m.expand(out, f.next, depth+1)
	case kSet:
		return appendStack(out, f)
	}
	// A reference: the continuation after it, then each alternative (a
	// reference last in its alternative leaves no frame behind).
	cont := f.next
	if g.elems[f.pos+1].kind != kEnd {
		cont = m.mk(f.pos+1, f.next)
	}
	for _, a := range g.rules[e.ref] {
		out = m.expand(out, m.mk(a, cont), depth+1)
	}
	return out
}

// appendStack adds f unless it is there already (interning makes equal
// stacks the same pointer).
func appendStack(out []*frame, f *frame) []*frame {
	if slices.Contains(out, f) {
		return out
	}
	return append(out, f)
}

// step is the state after byte c.
func (m *Matcher) step(s *state, c byte) *state {
	if n, ok := s.next[c]; ok {
		return n
	}
	if len(m.states) > m.memoStates || len(m.frames) > maxFrames {
		// The memo is full: start it again. States already made stay
		// valid; they are just no longer shared.
		m.reset()
	}
	var out []*frame
	for _, f := range s.stacks {
		if f == nil || !m.g.elems[f.pos].set.has(c) {
			continue
		}
		out = m.expand(out, m.mk(f.pos+1, f.next), 0)
	}
	n := m.intern(out)
	s.next[c] = n
	return n
}

func (s *state) accepting() bool { return slices.Contains(s.stacks, nil) }

// Accepting reports whether the output so far is a whole sentence of the
// grammar (so that generation may end here).
func (m *Matcher) Accepting() bool { return m.cur.accepting() }

// Done reports whether the output is complete and nothing may follow.
func (m *Matcher) Done() bool { return len(m.cur.stacks) == 1 && m.cur.stacks[0] == nil }

// Allowed reports whether token id may come next.
func (m *Matcher) Allowed(id int32) bool {
	if m.v.eog(id) {
		return m.Accepting()
	}
	b := m.v.bytes(id)
	if len(b) == 0 {
		return false
	}
	s := m.cur
	for _, c := range b {
		if s = m.step(s, c); s == m.dead {
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
	m.walk(0, m.cur, allowed)
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

// walk marks in allowed every token under trie node at whose bytes keep
// some stack of s alive.
func (m *Matcher) walk(at int32, s *state, allowed []bool) {
	nd := &m.v.nodes[at]
	for i, c := range nd.keys {
		ns := m.step(s, c)
		if ns == m.dead {
			continue
		}
		kid := nd.kids[i]
		for _, id := range m.v.nodes[kid].ends {
			if int(id) < len(allowed) {
				allowed[id] = true
			}
		}
		m.walk(kid, ns, allowed)
	}
}

// Accept advances the state past token id, which must be allowed.
func (m *Matcher) Accept(id int32) error {
	if m.v.eog(id) {
		if !m.Accepting() {
			return fmt.Errorf("grammar: end of generation (token %d) before the output is complete", id)
		}
		m.cur = m.intern([]*frame{nil})
		return nil
	}
	s := m.cur
	for _, c := range m.v.bytes(id) {
		if s = m.step(s, c); s == m.dead {
			return fmt.Errorf("grammar: token %d (%q) does not continue the output", id, m.v.bytes(id))
		}
	}
	m.cur = s
	return nil
}

// AcceptText advances the state past s (text already in the output, such
// as a forced prefix).
func (m *Matcher) AcceptText(s string) error {
	st := m.cur
	for i := range len(s) {
		if st = m.step(st, s[i]); st == m.dead {
			return fmt.Errorf("grammar: %q does not match at byte %d", s, i)
		}
	}
	m.cur = st
	return nil
}
