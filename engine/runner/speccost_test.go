package runner

import (
	"math"
	"testing"
	"time"
)

func TestBestK(t *testing.T) {
	for _, c := range []struct {
		name        string
		alpha       float64
		least, maxK int
		d, a, b     float64
		want        int
		whyNotMore  string
	}{
		// E(k)/T(k) at α 0.65, d 0.25, a 1, b 0.05: k=1 1.65/1.35 = 1.222,
		// k=2 2.07/1.65 = 1.257, k=3 2.36/1.95 = 1.212.
		{"a draft a quarter of a step", 0.65, 1, 8, 0.25, 1, 0.05, 2, "k=3 yields fewer tokens a ns"},
		{"prompt lookup costs no pass", 0.65, 1, 8, 0, 1, 0, 8, ""},
		{"lookup, rows that cost", 0.4, 1, 8, 0, 1, 0.2, 1, "k=2: 1.56/1.6 < 1.4/1.4"},
		{"a slow link makes the step dear", 0.8, 1, 8, 0.25, 12, 0.05, 8, ""},
		// At α 0.6 a 6th draft counts only when the 5 before it were
		// accepted (7.8 %): less than its pass.
		{"a slow link, and a draft less often right", 0.6, 1, 8, 0.25, 12, 0.05, 5, "k=6: 2.43/13.85 < 2.38/13.55"},
		{"a draft that is never right, alone", 0, 1, 8, 0.25, 1, 0.05, 1, "every k above 1 costs and gains nothing"},
		{"a draft that is never right, in a batch", 0, 0, 8, 0.25, 1, 0.05, 0, "every k above 0 costs and gains nothing"},
		{"max bounds it", 0.99, 1, 3, 0, 1, 0, 3, ""},
		// The KJV pair as measured alone (d 0.4, a 1.2, b 0.2 ms) at α
		// 0.75: k=2 2.31/2.6 = 0.89 against 1/1.4 = 0.71 for none.
		{"the KJV pair, one slot", 0.75, 0, 8, 0.4, 1.2, 0.2, 2, "k=3: 2.73/3.2 < 2.31/2.6"},
		// Four slots share a: a slot's step costs 0.3 + 0.2; a draft pass
		// and its row (0.6) win less than a token of 0.5.
		{"the KJV pair, a quarter of a step", 0.75, 0, 8, 0.4, 0.3, 0.2, 0, "k=1: 1.75/1.1 < 1/0.5"},
		{"prompt lookup, a quarter of a step", 0.75, 0, 8, 0, 0.3, 0.2, 2, "k=3: 2.73/1.1 < 2.31/0.9"},
	} {
		if got := bestK(c.alpha, c.least, c.maxK, c.d, c.a, c.b); got != c.want {
			t.Errorf("%s: bestK(α %.2f, %d..%d, d %g, a %g, b %g) = %d, want %d (%s)", c.name, c.alpha, c.least, c.maxK, c.d, c.a, c.b, got, c.want, c.whyNotMore)
		}
	}
}

func TestSpecCostLine(t *testing.T) {
	var c specCost
	if _, _, ok := c.line(); ok {
		t.Fatal("a line from no steps")
	}
	for range 20 {
		c.step(1, 1300*time.Microsecond)
	}
	if _, _, ok := c.line(); ok {
		t.Fatal("a slope from steps that all had 1 row")
	}
	// Steps of 1..5 rows on the line 1.2 ms + 0.2 ms a row.
	for i := range 40 {
		rows := 1 + i%5
		c.step(rows, time.Duration(1200+200*rows)*time.Microsecond)
	}
	a, b, ok := c.line()
	if !ok {
		t.Fatal("no line from steps of 1 to 5 rows")
	}
	// The 20 early 1-row steps at 1.3 ms sit below the line (1.4 ms);
	// decayed, they pull it a little.
	if math.Abs(a-1.2e6) > 0.1e6 || math.Abs(b-0.2e6) > 0.03e6 {
		t.Errorf("line %.0f + %.0f·rows ns, want about 1200000 + 200000·rows", a, b)
	}
	for range 200 {
		c.draft(4, 1600*time.Microsecond)
	}
	if math.Abs(c.draftNs-400e3) > 1 {
		t.Errorf("draft pass %.0f ns, want 400000", c.draftNs)
	}
}

// TestNextK walks a slot through steps: without a measured line it follows
// Hugging Face's schedule; with one, its acceptance and the costs choose.
func TestNextK(t *testing.T) {
	var c specCost
	sl := &slot{draftK: 5}
	c.nextK(sl, 5, 2, 5, true, 1)
	if sl.draftK != 4 {
		t.Errorf("no line yet, a rejection: k %d, want 4 (one fewer)", sl.draftK)
	}
	c.nextK(sl, 4, 4, 5, true, 1)
	if sl.draftK != 5 {
		t.Errorf("no line yet, all accepted: k %d, want 5 (two more, at most the max)", sl.draftK)
	}
	for i := range 40 {
		rows := 1 + i%5
		c.step(rows, time.Duration(1000+50*rows)*time.Microsecond)
	}
	c.draft(1, 250*time.Microsecond)
	// A run of drafts all accepted: α near 1, so the max.
	for range 10 {
		c.nextK(sl, sl.draftK, sl.draftK, 8, true, 1)
	}
	if sl.draftK != 8 {
		t.Errorf("every draft accepted (α %.2f): k %d, want 8", slotAlpha(sl), sl.draftK)
	}
	// Then every draft rejected at once: α falls, and so does k.
	for range 30 {
		c.nextK(sl, max(sl.draftK, 1), 0, 8, true, 1)
	}
	if sl.draftK != 1 {
		t.Errorf("every draft rejected, alone (α %.2f): k %d, want 1", slotAlpha(sl), sl.draftK)
	}
	// In a batch of 2 it stops drafting.
	c.nextK(sl, 1, 0, 8, true, 2)
	if sl.draftK != 0 {
		t.Errorf("every draft rejected, one of 2 (α %.2f): k %d, want 0", slotAlpha(sl), sl.draftK)
	}
	// At k 0 the slot drafts nothing, but one token every probeEvery
	// steps where drafting could pay, to learn whether α has changed.
	var got []int
	pays, never := func() bool { return true }, func() bool { return false }
	for range 2 * probeEvery {
		got = append(got, sl.draftLen(pays))
	}
	for i, k := range got {
		if want := map[bool]int{true: 1}[i%probeEvery == probeEvery-1]; k != want {
			t.Fatalf("steps at k 0 draft %v, want a 1 every %d", got, probeEvery)
		}
	}
	for range 2 * probeEvery {
		if k := sl.draftLen(never); k != 0 {
			t.Fatalf("k 0 where drafting cannot pay: drafted %d", k)
		}
	}
	// A new request, before any cost is measured, drafts the max.
	nw := &slot{}
	(&specCost{}).firstK(nw, 6, true, 1)
	if !nw.kChosen || nw.draftLen(never) != 6 {
		t.Errorf("a new slot before any cost: drafts %d (chosen %v), want the max 6", nw.draftK, nw.kChosen)
	}
	// Prompt lookup at the same acceptance costs no draft pass: it drafts
	// more than the model would.
	lk := &slot{accepted: 2, rejections: 1}
	md := &slot{accepted: 2, rejections: 1}
	c.nextK(lk, 2, 1, 8, false, 1)
	c.nextK(md, 2, 1, 8, true, 1)
	if lk.draftK <= md.draftK {
		t.Errorf("at α %.2f prompt lookup drafts %d and a model %d: want lookup more", slotAlpha(lk), lk.draftK, md.draftK)
	}
	// Eight slots decoding together share the 1 ms base: the model's
	// drafts (a pass 0.25 ms) no longer pay at α 0.75, nor could they
	// at α 1 (the pass costs more than a slot's share, 0.125); prompt
	// lookup could. Alone they do.
	alone, shared := &slot{accepted: 3, rejections: 1}, &slot{accepted: 3, rejections: 1}
	c.nextK(alone, 3, 3, 8, true, 1)
	c.nextK(shared, 3, 3, 8, true, 8)
	if alone.draftK < 1 || shared.draftK != 0 {
		t.Errorf("at α %.2f a slot alone drafts %d (want some), one of 8 drafts %d (want 0)", slotAlpha(alone), alone.draftK, shared.draftK)
	}
	if c.mayPay(8, true, 8) || !c.mayPay(8, true, 1) || !c.mayPay(8, false, 8) {
		t.Errorf("may drafting pay? a model for one of 8 %v (want false), alone %v, lookup for one of 8 %v (want true)",
			c.mayPay(8, true, 8), c.mayPay(8, true, 1), c.mayPay(8, false, 8))
	}
	// A new request among 8 starts from the prior α and the known costs:
	// no drafts; alone, some.
	first, firstAlone := &slot{}, &slot{}
	c.firstK(first, 8, true, 8)
	c.firstK(firstAlone, 8, true, 1)
	if !first.kChosen || !firstAlone.kChosen || first.draftK != 0 || firstAlone.draftK < 1 {
		t.Errorf("a new request's first k: %d among 8 (want 0), %d alone (want some)", first.draftK, firstAlone.draftK)
	}
	if (&specCost{}).choose(&slot{}, 8, true, 1) {
		t.Error("a choice from costs not yet measured")
	}
	if !(&specCost{}).mayPay(8, true, 8) {
		t.Error("before any cost is measured, drafting must be allowed to pay")
	}
}
