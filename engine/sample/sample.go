// Package sample picks the next token from a rank's logits: greedy, or
// temperature with top-k and top-p (nucleus) filtering, from a seeded
// generator so that a request with a seed is reproducible.
package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Options are a request's sampling parameters, with OpenAI's meanings.
type Options struct {
	// Temperature 0 is greedy (argmax); higher flattens the distribution.
	Temperature float64
	// TopK keeps the k most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose
	// probabilities sum to at least p (0 or 1: all).
	TopP float64
	// Seed seeds the generator; requests with the same seed, options and
	// prompt sample the same tokens.
	Seed uint64
}

// Validate checks the ranges.
func (o Options) Validate() error {
	switch {
	case math.IsNaN(o.Temperature) || o.Temperature < 0 || o.Temperature > 10:
		return fmt.Errorf("temperature %v: want 0..10", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("top_k %d: want ≥ 0", o.TopK)
	case math.IsNaN(o.TopP) || o.TopP < 0 || o.TopP > 1:
		return fmt.Errorf("top_p %v: want 0..1", o.TopP)
	}
	return nil
}

// Sampler draws tokens. It keeps scratch space between calls and is not
// safe for concurrent use.
type Sampler struct {
	opts Options
	rng  *rand.Rand
	cand []cand
	xs   []float64 // scratch for mayTopK
	c    Constraint
	mask []float32
}

// Constraint limits which tokens may come next: a grammar
// (engine/grammar's Matcher).
type Constraint interface {
	// Allowed reports whether id may come next.
	Allowed(id int32) bool
	// Mask sets the logits of the tokens that may not come next to -Inf;
	// it fails when no token may.
	Mask(logits []float32) error
	// Accept advances past id.
	Accept(id int32) error
}

// Constrain makes Next pick only tokens c allows, and tell c each pick.
func (s *Sampler) Constrain(c Constraint) { s.c = c }

type cand struct {
	id int32
	p  float64
}

// New returns a sampler for o (which must be valid).
func New(o Options) *Sampler {
	return &Sampler{opts: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
}

// Next picks a token from logits (one per vocabulary entry). NaN logits
// are never picked; if every logit is NaN or -Inf it returns an error.
// Under a constraint it first draws as usual and keeps the token if the
// constraint allows it (the common case for a model that follows the
// format); otherwise it draws again from the masked logits, as
// llama.cpp's grammar sampler does. logits is left unchanged.
func (s *Sampler) Next(logits []float32) (int32, error) {
	id, err := s.next(logits)
	if err != nil || s.c == nil {
		return id, err
	}
	if !s.c.Allowed(id) {
		s.mask = append(s.mask[:0], logits...)
		if err := s.c.Mask(s.mask); err != nil {
			return 0, err
		}
		if id, err = s.next(s.mask); err != nil {
			return 0, err
		}
	}
	return id, s.c.Accept(id)
}

func (s *Sampler) next(logits []float32) (int32, error) {
	c, total, best, err := s.dist(logits)
	if err != nil || c == nil {
		return best, err
	}
	return s.draw(c, total, -1), nil
}

// Greedy reports whether the sampler always takes the most likely token.
func (s *Sampler) Greedy() bool { return s.opts.Temperature == 0 || s.opts.TopK == 1 }

// Verify decides a drafted token (speculative decoding) against logits,
// keeping the distribution Next draws from exactly: the draft is accepted
// with the probability Next would give it; if not, the token is drawn from
// that distribution without the draft (the residual of a draft that
// proposes one token with certainty). Greedy, the draft is accepted when
// it is the token Next would pick, and tok is that token either way. Under
// a constraint, a draft it does not allow is rejected, and the constraint
// hears tok, as from Next.
func (s *Sampler) Verify(logits []float32, draft int32) (tok int32, accepted bool, err error) {
	if s.c != nil {
		tok, accepted, err = s.verifyConstrained(logits, draft)
		if err != nil {
			return 0, false, err
		}
		return tok, accepted, s.c.Accept(tok)
	}
	c, total, best, err := s.dist(logits)
	if err != nil || c == nil {
		return best, best == draft, err
	}
	pd := 0.0
	for _, x := range c {
		if x.id == draft {
			pd = x.p / total
			break
		}
	}
	if pd > 0 && s.rng.Float64() < pd {
		return draft, true, nil
	}
	if pd >= 1 { // the draft is the only candidate
		return draft, true, nil
	}
	return s.draw(c, total*(1-pd), draft), false, nil
}

// verifyConstrained is Verify under a constraint. Next there draws from
// the unconstrained distribution p1 and keeps an allowed token, else draws
// from the masked logits' distribution p2 (truncations redone on them), so
// it draws t with P(t) = p1(t)·allowed(t) + (1 − A)·p2(t), A being the
// allowed mass of p1. The draft is accepted with probability P(draft);
// otherwise the token comes from P without it.
func (s *Sampler) verifyConstrained(logits []float32, draft int32) (int32, bool, error) {
	c1, total1, best, err := s.dist(logits)
	if err != nil {
		return 0, false, err
	}
	masked := func() ([]cand, float64, int32, error) {
		s.mask = append(s.mask[:0], logits...)
		if err := s.c.Mask(s.mask); err != nil {
			return nil, 0, 0, err
		}
		return s.dist(s.mask)
	}
	if c1 == nil { // greedy: the allowed argmax
		if !s.c.Allowed(best) {
			if _, _, best, err = masked(); err != nil {
				return 0, false, err
			}
		}
		return best, best == draft, nil
	}
	// P as (id, probability) pairs; c1 is scratch that dist reuses.
	p := make([]cand, 0, len(c1))
	allowed := 0.0
	for _, x := range c1 {
		if s.c.Allowed(x.id) {
			p = append(p, cand{x.id, x.p / total1})
			allowed += x.p / total1
		}
	}
	if allowed < 1 {
		c2, total2, _, err := masked()
		if err != nil {
			return 0, false, err
		}
		at := make(map[int32]int, len(p))
		for i, x := range p {
			at[x.id] = i
		}
		for _, x := range c2 {
			q := (1 - allowed) * x.p / total2
			if i, ok := at[x.id]; ok {
				p[i].p += q
			} else {
				p = append(p, cand{x.id, q})
			}
		}
	}
	pd := 0.0
	for _, x := range p {
		if x.id == draft {
			pd = x.p
			break
		}
	}
	if pd > 0 && (pd >= 1 || s.rng.Float64() < pd) {
		return draft, true, nil
	}
	return s.draw(p, 1-pd, draft), false, nil
}

// dist is the distribution Next draws from: its candidates (unnormalised
// p) and their total; nil candidates when greedy, with best the argmax.
func (s *Sampler) dist(logits []float32) (c []cand, total float64, best int32, err error) {
	if len(logits) == 0 {
		return nil, 0, 0, fmt.Errorf("no logits")
	}
	b := -1
	for i, l := range logits {
		if !isBad(l) && (b < 0 || l > logits[b]) {
			b = i
		}
	}
	if b < 0 {
		return nil, 0, 0, fmt.Errorf("all %d logits are NaN or -Inf", len(logits))
	}
	best = int32(b)
	o := s.opts
	if s.Greedy() {
		return nil, 0, best, nil
	}
	// Softmax at temperature, relative to the max for stability: each
	// candidate's exponent first, then p = exp of it, for those that can
	// make the top k.
	maxL := float64(logits[b])
	s.cand = s.cand[:0]
	for i, l := range logits {
		if !isBad(l) {
			s.cand = append(s.cand, cand{int32(i), (float64(l) - maxL) / o.Temperature})
		}
	}
	c = s.cand
	k := o.TopK
	cut := k > 0 && k < len(c)
	if cut && !math.IsInf(maxL, 1) {
		c, s.xs = mayTopK(c, k, s.xs) // still k or more
	}
	for i := range c {
		c[i].p = math.Exp(c[i].p)
	}
	if cut {
		c = topK(c, k)
	}
	if o.TopP > 0 && o.TopP < 1 {
		if !cut { // topK sorted them
			slices.SortFunc(c, byProb)
		}
		c = cutTopP(c, o.TopP)
	}
	return c, sumP(c), best, nil
}

// cutTopP keeps the fewest of c (sorted by byProb) whose p add up to at
// least topP of their total.
func cutTopP(c []cand, topP float64) []cand {
	total := sumP(c)
	var cum float64
	for i, x := range c {
		cum += x.p
		if cum >= topP*total {
			return c[:i+1]
		}
	}
	return c
}

// sumP is the total of c's p, in order.
func sumP(c []cand) (total float64) {
	for _, x := range c {
		total += x.p
	}
	return total
}

// draw picks from c (total: the sum of its p, less skip's) leaving out
// skip (-1: none).
func (s *Sampler) draw(c []cand, total float64, skip int32) int32 {
	r := s.rng.Float64() * total
	last := int32(-1)
	for _, x := range c {
		if x.id == skip {
			continue
		}
		last = x.id
		r -= x.p
		if r < 0 {
			return x.id
		}
	}
	return last
}

// byProb orders by probability, highest first, then by id for determinism.
func byProb(a, b cand) int {
	switch {
	case a.p > b.p:
		return -1
	case a.p < b.p:
		return 1
	}
	return int(a.id - b.id)
}

func isBad(l float32) bool { return l != l || math.IsInf(float64(l), -1) }

// topK reorders c so that its first k are the k best by byProb, in that
// order, and returns them: the same as sorting c and keeping k, in
// O(n log k). (Sorting 32,000 candidates took 6 ms a token.)
func topK(c []cand, k int) []cand {
	// c[:k] is a heap whose root is the worst of the k best so far.
	worse := func(a, b cand) bool { return byProb(a, b) > 0 }
	heapify(c[:k], worse)
	for i := k; i < len(c); i++ {
		if byProb(c[i], c[0]) < 0 {
			c[0], c[i] = c[i], c[0]
			siftDown(c[:k], 0, worse)
		}
	}
	c = c[:k]
	slices.SortFunc(c, byProb)
	return c
}

// mayTopK keeps, of c (each p still its exponent x), every candidate whose
// exp(x) may be among the k largest: all whose x is at least the k-th
// largest x, xk, less 1e-9. Below that, exp(x) is smaller than exp(xk) by
// a factor 1-1e-9, far beyond math.Exp's rounding, so the k best and
// their ties come out as from every candidate, and math.Exp runs on about
// k of them, not the whole vocabulary (0.78 → 0.23–0.33 ms a token at 32 k).
// Where exp(xk) would underflow, so that ties at 0 could reach far below
// it, c is kept whole. scratch is reused for the selection.
func mayTopK(c []cand, k int, scratch []float64) ([]cand, []float64) {
	h := scratch[:0] // a min-heap of the k largest x so far
	for _, x := range c[:k] {
		h = append(h, x.p)
	}
	less := func(a, b float64) bool { return a < b }
	heapify(h, less)
	for _, x := range c[k:] {
		if x.p > h[0] {
			h[0] = x.p
			siftDown(h, 0, less)
		}
	}
	xk := h[0]
	if !(xk > -700) { // exp underflows near there (or x is NaN)
		return c, h
	}
	keep := c[:0]
	for _, x := range c {
		if x.p >= xk-1e-9 {
			keep = append(keep, x)
		}
	}
	return keep, h
}

// heapify orders h as a heap whose root is the first by before.
func heapify[T any](h []T, before func(a, b T) bool) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i, before)
	}
}

// siftDown moves h[i] down to its place in the heap h.
func siftDown[T any](h []T, i int, before func(a, b T) bool) {
	for {
		m, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && before(h[l], h[m]) {
			m = l
		}
		if r < len(h) && before(h[r], h[m]) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
