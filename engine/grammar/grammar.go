// Package grammar constrains generation to a context-free language over
// bytes: JSON that validates against a JSON Schema (response_format), and
// tool calls in a model family's format (tool_choice "required"). It
// follows llama.cpp's grammar sampler: a set of parse stacks advanced byte
// by byte, a token allowed when its bytes keep some stack alive, and an
// end-of-generation token allowed only where the grammar accepts.
//
// Working on bytes rather than code points means a token that splits a
// UTF-8 character needs no special state; the grammars spell out valid
// UTF-8 themselves, so the output stays valid text.
package grammar

import (
	"fmt"
	"strings"
)

// Grammar is a compiled grammar. It is immutable and safe for concurrent
// use; a Matcher holds one request's parse state.
type Grammar struct {
	// elems holds every alternative of every rule, each ended by kEnd.
	elems []elem
	// rules[r] are the positions in elems where rule r's alternatives
	// start.
	rules [][]int32
	root  int32
}

type elemKind uint8

const (
	kEnd elemKind = iota
	kSet          // one byte out of set
	kRef          // the rule ref
)

type elem struct {
	kind elemKind
	ref  int32
	set  *byteSet
}

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (s *byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }
func (s *byteSet) add(c byte)      { s[c>>6] |= 1 << (c & 63) }

func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

// seq is a sequence of elements (no kEnd): a piece of one alternative.
type seq []elem

// builder assembles a Grammar. Rules are numbered as they are made; a rule
// may be referred to before it is defined (for recursion).
type builder struct {
	alts  [][]seq // per rule
	sets  map[byteSet]*byteSet
	limit int // most rules, so that a hostile schema cannot exhaust memory
	err   error
}

// maxRules bounds a grammar's size.
const maxRules = 20000

func newBuilder() *builder {
	return &builder{sets: map[byteSet]*byteSet{}, limit: maxRules}
}

// errTooLarge is returned when a grammar would have more than maxRules.
var errTooLarge = fmt.Errorf("the grammar would have more than %d rules", maxRules)

func (b *builder) newRule() (int32, error) {
	if len(b.alts) >= b.limit {
		b.err = errTooLarge
		return 0, errTooLarge
	}
	b.alts = append(b.alts, nil)
	return int32(len(b.alts) - 1), nil
}

func (b *builder) define(r int32, alts ...seq) { b.alts[r] = alts }

// set is one byte out of s (interned, so equal sets share memory).
func (b *builder) set(s byteSet) seq {
	p := b.sets[s]
	if p == nil {
		p = new(byteSet)
		*p = s
		b.sets[s] = p
	}
	return seq{{kind: kSet, set: p}}
}

func (b *builder) byteOf(c byte) seq {
	var s byteSet
	s.add(c)
	return b.set(s)
}

// lit is the bytes of s, in order.
func (b *builder) lit(s string) seq {
	out := make(seq, 0, len(s))
	for i := range len(s) {
		out = append(out, b.byteOf(s[i])...)
	}
	return out
}

func ref(r int32) seq { return seq{{kind: kRef, ref: r}} }

func cat(parts ...seq) seq {
	var out seq
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// alt is one of the alternatives (a new rule).
func (b *builder) alt(alts ...seq) (seq, error) {
	r, err := b.newRule()
	if err != nil {
		return nil, err
	}
	b.define(r, alts...)
	return ref(r), nil
}

// opt is s or nothing.
func (b *builder) opt(s seq) (seq, error) { return b.alt(s, nil) }

// star is s repeated any number of times (right-recursive, so that the
// parse stacks do not grow with the count).
func (b *builder) star(s seq) (seq, error) {
	r, err := b.newRule()
	if err != nil {
		return nil, err
	}
	b.define(r, cat(s, ref(r)), nil)
	return ref(r), nil
}

// rep is s repeated min to max times (max < 0: unbounded).
func (b *builder) rep(s seq, min, max int) (seq, error) {
	var out seq
	for range min {
		out = append(out, s...)
	}
	if max < 0 {
		st, err := b.star(s)
		if err != nil {
			return nil, err
		}
		return cat(out, st), nil
	}
	// (s (s (s)?)?)? for the optional part, nested so that each s
	// follows the previous one.
	var tail seq
	for range max - min {
		o, err := b.opt(cat(s, tail))
		if err != nil {
			return nil, err
		}
		tail = o
	}
	return cat(out, tail), nil
}

// build makes the Grammar whose start symbol is root.
func (b *builder) build(root seq) (*Grammar, error) {
	r, _ := b.newRule()
	if b.err != nil {
		return nil, b.err
	}
	b.define(r, root)
	g := &Grammar{rules: make([][]int32, len(b.alts)), root: r}
	for i, alts := range b.alts {
		for _, a := range alts {
			g.rules[i] = append(g.rules[i], int32(len(g.elems)))
			g.elems = append(g.elems, a...)
			g.elems = append(g.elems, elem{kind: kEnd})
		}
	}
	return g, nil
}

// String writes the grammar in a GBNF-like form, for tests and errors.
func (g *Grammar) String() string {
	var sb strings.Builder
	for r, alts := range g.rules {
		fmt.Fprintf(&sb, "r%d ::=", r)
		for i, p := range alts {
			if i > 0 {
				sb.WriteString(" |")
			}
			for ; g.elems[p].kind != kEnd; p++ {
				e := g.elems[p]
				if e.kind == kRef {
					fmt.Fprintf(&sb, " r%d", e.ref)
				} else {
					sb.WriteString(" " + e.set.String())
				}
			}
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

func (s *byteSet) String() string {
	var parts []string
	for c := 0; c < 256; c++ {
		if !s.has(byte(c)) {
			continue
		}
		d := c
		for d+1 < 256 && s.has(byte(d+1)) {
			d++
		}
		if d == c {
			parts = append(parts, fmt.Sprintf("%q", rune(c)))
		} else {
			parts = append(parts, fmt.Sprintf("%q-%q", rune(c), rune(d)))
		}
		c = d
	}
	return "[" + strings.Join(parts, " ") + "]"
}
