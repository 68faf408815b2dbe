package sample

import (
	"math"
	"testing"
)

func TestGreedy(t *testing.T) {
	s := New(Options{})
	got, err := s.Next([]float32{0.1, 3, float32(math.NaN()), 2.9})
	if err != nil || got != 1 {
		t.Fatalf("Next = %d, %v; want 1", got, err)
	}
	if _, err := s.Next([]float32{float32(math.NaN()), float32(math.Inf(-1))}); err == nil {
		t.Fatal("all-NaN logits: want an error")
	}
	if _, err := s.Next(nil); err == nil {
		t.Fatal("no logits: want an error")
	}
}

// Top-k 2 never picks outside the two best; top-p that the best token alone
// covers always picks it; the same seed gives the same sequence.
func TestFilters(t *testing.T) {
	logits := []float32{1, 5, 4.5, 0, -2}
	s := New(Options{Temperature: 1, TopK: 2, Seed: 3})
	seen := map[int32]int{}
	for range 2000 {
		id, err := s.Next(logits)
		if err != nil {
			t.Fatal(err)
		}
		seen[id]++
	}
	if len(seen) != 2 || seen[1] == 0 || seen[2] == 0 {
		t.Fatalf("top-k 2 picked %v, want only ids 1 and 2", seen)
	}
	// p(1) = e^5/(e^5+e^4.5+…) ≈ 0.6: top-p 0.5 keeps id 1 alone.
	s = New(Options{Temperature: 1, TopP: 0.5, Seed: 3})
	for range 200 {
		if id, _ := s.Next(logits); id != 1 {
			t.Fatalf("top-p 0.5 picked %d, want 1", id)
		}
	}
	// Top-p 0.99 lets more than one through.
	s = New(Options{Temperature: 1, TopP: 0.99, Seed: 3})
	seen = map[int32]int{}
	for range 2000 {
		id, _ := s.Next(logits)
		seen[id]++
	}
	if len(seen) < 3 {
		t.Fatalf("top-p 0.99 picked only %v", seen)
	}
	a, b := New(Options{Temperature: 0.8, Seed: 42}), New(Options{Temperature: 0.8, Seed: 42})
	for i := range 100 {
		x, _ := a.Next(logits)
		y, _ := b.Next(logits)
		if x != y {
			t.Fatalf("draw %d: %d vs %d with the same seed", i, x, y)
		}
	}
}

// At temperature 1 the frequencies follow the softmax.
func TestDistribution(t *testing.T) {
	logits := []float32{0, float32(math.Log(3))} // p = 0.25, 0.75
	s := New(Options{Temperature: 1, Seed: 1})
	n, ones := 20000, 0
	for range n {
		if id, _ := s.Next(logits); id == 1 {
			ones++
		}
	}
	if f := float64(ones) / float64(n); math.Abs(f-0.75) > 0.02 {
		t.Fatalf("p(1) = %.3f, want 0.75 ± 0.02", f)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{{Temperature: -1}, {Temperature: math.NaN()}, {TopK: -1}, {TopP: 1.5}} {
		if o.Validate() == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
	if err := (Options{Temperature: 0.7, TopK: 40, TopP: 0.9}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// evenOnly allows even tokens and records what it was told.
type evenOnly struct{ accepted []int32 }

func (e *evenOnly) Allowed(id int32) bool { return id%2 == 0 }
func (e *evenOnly) Accept(id int32) error { e.accepted = append(e.accepted, id); return nil }
func (e *evenOnly) Mask(l []float32) error {
	for i := range l {
		if i%2 == 1 {
			l[i] = float32(math.Inf(-1))
		}
	}
	return nil
}

// Under a constraint, every pick is allowed (drawn again from the masked
// logits when the first draw is not), the constraint hears each pick, and
// the caller's logits are left as they were.
func TestConstrain(t *testing.T) {
	logits := []float32{0, 5, 1, 4, 2, 3}
	for _, temp := range []float64{0, 1} {
		c := &evenOnly{}
		s := New(Options{Temperature: temp, Seed: 3})
		s.Constrain(c)
		for range 20 {
			id, err := s.Next(logits)
			if err != nil || id%2 != 0 {
				t.Fatalf("temperature %v: %d, %v", temp, id, err)
			}
		}
		if len(c.accepted) != 20 || logits[1] != 5 {
			t.Errorf("temperature %v: %d accepted, logits %v", temp, len(c.accepted), logits)
		}
		if temp == 0 && c.accepted[0] != 4 {
			t.Errorf("greedy under the constraint picked %d, want 4", c.accepted[0])
		}
	}
}

// Verify keeps the sampling distribution exactly, whichever token is
// drafted: a chi-square test over many seeded draws against the
// probabilities Next draws from (temperature, top-k, top-p), for a likely,
// an unlikely and an impossible draft. Greedy accepts the argmax only.
func TestVerifyKeepsDistribution(t *testing.T) {
	logits := []float32{2, 1.5, 0.3, -1, 0.9, -3}
	for _, o := range []Options{{Temperature: 1}, {Temperature: 0.7, TopK: 4}, {Temperature: 1.3, TopP: 0.9}} {
		s := New(Options{Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, Seed: 1})
		c, total, _, err := s.dist(logits)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]float64, len(logits))
		for _, x := range c {
			p[x.id] = x.p / total
		}
		for _, draft := range []int32{0, 3, 5} {
			const n = 200000
			counts := make([]float64, len(logits))
			accepted := 0
			v := New(Options{Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, Seed: uint64(7 + draft)})
			for range n {
				tok, ok, err := v.Verify(logits, draft)
				if err != nil {
					t.Fatal(err)
				}
				if ok != (tok == draft) {
					t.Fatalf("accepted %v but token %d for draft %d", ok, tok, draft)
				}
				if ok {
					accepted++
				}
				counts[tok]++
			}
			chi, dof := 0.0, -1
			for i, q := range p {
				if q == 0 {
					if counts[i] != 0 {
						t.Errorf("%+v draft %d: token %d (probability 0) drawn %v times", o, draft, i, counts[i])
					}
					continue
				}
				d := counts[i] - n*q
				chi += d * d / (n * q)
				dof++
			}
			// 99.9th percentile of chi-square with ≤ 5 degrees of freedom: 20.5.
			t.Logf("%+v draft %d: accepted %.3f (p %.3f), chi-square %.2f on %d dof", o, draft, float64(accepted)/n, p[draft], chi, dof)
			if chi > 20.5 {
				t.Errorf("%+v draft %d: chi-square %.1f on %d dof: the distribution changed", o, draft, chi, dof)
			}
			if math.Abs(float64(accepted)/n-p[draft]) > 0.01 {
				t.Errorf("%+v draft %d: accepted %.4f of drafts, want p(draft) %.4f", o, draft, float64(accepted)/n, p[draft])
			}
		}
	}
	g := New(Options{})
	if tok, ok, _ := g.Verify(logits, 1); ok || tok != 0 {
		t.Errorf("greedy verify of a non-argmax draft: %d %v, want 0 false", tok, ok)
	}
	if tok, ok, _ := g.Verify(logits, 0); !ok || tok != 0 {
		t.Errorf("greedy verify of the argmax: %d %v, want 0 true", tok, ok)
	}
}

// Under a constraint (even tokens only), Verify keeps the distribution
// Next draws from: a chi-square test of Verify's draws against Next's own
// frequencies over as many seeded draws (temperature, top-k, top-p), for
// an allowed and a disallowed draft; a disallowed draft is never
// accepted, and the constraint hears every token. Greedy accepts the
// allowed argmax only.
func TestVerifyUnderConstraint(t *testing.T) {
	logits := []float32{0.5, 2, 1.5, 1.8, 0.3, -1, 0.9, -3}
	const n = 200000
	for _, o := range []Options{{Temperature: 1}, {Temperature: 0.8, TopK: 3}, {Temperature: 1.2, TopP: 0.7}} {
		want := make([]float64, len(logits))
		nx := New(Options{Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, Seed: 99})
		nx.Constrain(&evenOnly{})
		for range n {
			id, err := nx.Next(logits)
			if err != nil {
				t.Fatal(err)
			}
			want[id]++
		}
		for _, draft := range []int32{2, 1} {
			c := &evenOnly{}
			v := New(Options{Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, Seed: uint64(5 + draft)})
			v.Constrain(c)
			got := make([]float64, len(logits))
			accepted := 0
			for range n {
				tok, ok, err := v.Verify(logits, draft)
				if err != nil || ok != (tok == draft) || tok%2 != 0 {
					t.Fatalf("%+v draft %d: token %d accepted %v err %v", o, draft, tok, ok, err)
				}
				if ok {
					accepted++
				}
				got[tok]++
			}
			if draft%2 == 1 && accepted > 0 {
				t.Errorf("%+v: the disallowed draft %d was accepted %d times", o, draft, accepted)
			}
			if len(c.accepted) != n {
				t.Errorf("%+v draft %d: the constraint heard %d tokens, want %d", o, draft, len(c.accepted), n)
			}
			// Two samples of n draws each: sum (a-b)²/(a+b), chi-square on
			// (cells - 1) dof; 99.9th percentile for ≤ 4 dof: 18.5.
			chi, dof := 0.0, -1
			for i := range got {
				if got[i]+want[i] > 0 {
					d := got[i] - want[i]
					chi += d * d / (got[i] + want[i])
					dof++
				}
			}
			t.Logf("%+v draft %d: accepted %.3f, chi-square %.2f on %d dof", o, draft, float64(accepted)/n, chi, dof)
			if chi > 18.5 {
				t.Errorf("%+v draft %d: chi-square %.1f on %d dof: Verify's distribution is not Next's", o, draft, chi, dof)
			}
		}
	}
	g := New(Options{})
	g.Constrain(&evenOnly{})
	if tok, ok, _ := g.Verify(logits, 1); ok || tok != 2 {
		t.Errorf("greedy verify of the disallowed argmax: %d %v, want 2 false", tok, ok)
	}
	if tok, ok, _ := g.Verify(logits, 2); !ok || tok != 2 {
		t.Errorf("greedy verify of the allowed argmax: %d %v, want 2 true", tok, ok)
	}
}
