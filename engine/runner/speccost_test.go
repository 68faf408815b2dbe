package runner

import (
	"math"
	"testing"
	"time"
)

// stepLine is a step's time by rows 0..n on the line a + b·rows.
func stepLine(a, b float64, n int) []float64 {
	t := make([]float64, n+1)
	for r := 1; r <= n; r++ {
		t[r] = a + b*float64(r)
	}
	return t
}

// callLine is a draft call's time by passes 0..n: c0 + d·k, none at 0.
func callLine(c0, d float64, n int) []float64 {
	dc := make([]float64, n+1)
	for k := 1; k <= n; k++ {
		dc[k] = c0 + d*float64(k)
	}
	return dc
}

func TestBestK(t *testing.T) {
	// Measured here (ms, a 2-core EPYC): the KJV target's step by rows in
	// F16 and in F32, and the draft's call.
	f16 := []float64{0, 1.05, 1.78, 2.07, 2.49, 2.70}
	f32 := []float64{0, 1.95, 2.88, 3.415, 3.637, 4.128}
	kjvDraft := callLine(0.1, 0.23, 4)
	for _, c := range []struct {
		name       string
		alpha      float64
		maxK       int
		dc         []float64
		others     int
		t          []float64
		want       int
		whyNotMore string
	}{
		// (r + E(k)) / (D(k) + T(r+1+k)) at α 0.65, a pass 0.25, a step
		// 1 + 0.05·rows: k=1 1.65/1.35 = 1.222, k=2 2.07/1.65 = 1.257,
		// k=3 2.36/1.95 = 1.212.
		{"a draft a quarter of a step", 0.65, 8, callLine(0, 0.25, 8), 0, stepLine(1, 0.05, 9), 2, "k=3 yields fewer tokens a ns"},
		{"prompt lookup costs no call", 0.65, 8, make([]float64, 9), 0, stepLine(1, 0, 9), 8, ""},
		{"lookup, rows that cost", 0.4, 8, make([]float64, 9), 0, stepLine(1, 0.2, 9), 1, "k=2: 1.56/1.6 < 1.4/1.4"},
		{"a slow link makes the step dear", 0.8, 8, callLine(0, 0.25, 8), 0, stepLine(12, 0.05, 9), 8, ""},
		// At α 0.6 a 6th draft counts only when the 5 before it were
		// accepted (7.8 %): less than its pass.
		{"a slow link, and a draft less often right", 0.6, 8, callLine(0, 0.25, 8), 0, stepLine(12, 0.05, 9), 5, "k=6: 2.43/13.85 < 2.38/13.55"},
		{"a draft that is never right", 0, 8, callLine(0, 0.25, 8), 0, stepLine(1, 0.05, 9), 0, "every k above 0 costs and gains nothing"},
		{"max bounds it", 0.99, 3, make([]float64, 4), 0, stepLine(1, 0, 4), 3, ""},
		// F16 rows cost nearly a pass each: k=1 1.8/2.11 = 0.85, k=4
		// 3.36/3.72 = 0.90, against 1/1.05 = 0.95 for none.
		{"the KJV pair in F16", 0.8, 4, kjvDraft, 0, f16, 0, "no k pays"},
		// F32 rows after the second cost little: k=3 2.95/4.43 = 0.667,
		// k=4 3.36/5.15 = 0.653, k=0 1/1.95 = 0.513.
		{"the KJV pair in F32", 0.8, 4, kjvDraft, 0, f32, 3, "k=4: 3.36/5.15 < 2.95/4.43"},
		// Beside 3 other slots' rows, on 1.2 + 0.2·rows: none 4/2 = 2,
		// the model's k=1 4.75/2.6 = 1.83; lookup's k=2 5.31/2.4 = 2.21,
		// k=3 5.73/2.6 = 2.21 (less by a hair).
		{"a draft model, one of 4", 0.75, 8, callLine(0, 0.4, 8), 3, stepLine(1.2, 0.2, 12), 0, "k=1: 4.75/2.6 < 4/2"},
		{"prompt lookup, one of 4", 0.75, 8, make([]float64, 9), 3, stepLine(1.2, 0.2, 12), 2, "k=3: 5.73/2.6 < 5.31/2.4"},
	} {
		if got := bestK(c.alpha, c.maxK, c.dc, c.others, c.t); got != c.want {
			t.Errorf("%s: bestK(α %.2f, max %d, others %d) = %d, want %d (%s)", c.name, c.alpha, c.maxK, c.others, got, c.want, c.whyNotMore)
		}
	}
}

func TestSpecCostCurve(t *testing.T) {
	var c specCost
	if _, ok := c.curve(8); ok {
		t.Fatal("a curve from no steps")
	}
	for range 20 {
		c.step(1, 1300*time.Microsecond)
	}
	if _, ok := c.curve(8); ok {
		t.Fatal("a curve from steps that all had 1 row")
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e3 {
			t.Errorf("%s: %.0f ns, want %.0f", what, got, want)
		}
	}
	// Steps of 3 and 5 rows, none of 1 (a slot drafting every step):
	// the line of the two, down to 1 row.
	var d specCost
	for range 10 {
		d.step(3, 2*time.Millisecond)
	}
	if _, ok := d.curve(5); ok {
		t.Error("a curve from steps of 3 rows alone")
	}
	for range 10 {
		d.step(5, 3*time.Millisecond)
	}
	if tt, ok := d.curve(5); !ok || math.Abs(tt[1]-1e6) > 0.05e6 {
		t.Errorf("steps of 3 and 5 rows: curve %v (ok %v), want 1 row about 1 ms, on their line", tt, ok)
	}

	// Steps of 5 rows only: from 1 row through them.
	for range 20 {
		c.step(5, 3*time.Millisecond)
	}
	tt, ok := c.curve(9)
	if !ok {
		t.Fatal("no curve from steps of 1 and 5 rows")
	}
	near("1 row", tt[1], 1.3e6)
	near("5 rows", tt[5], 3e6)
	near("3 rows, from 1 to 5", tt[3], 2.15e6)
	near("9 rows, on from 1 through 5", tt[9], 4.7e6)

	// Steps of 2 to 5 rows: a line through them, and the 1-row mean on
	// its own (F16 on this CPU: 1.05 ms, then 1.78 to 2.70).
	var f specCost
	ms := []float64{1.05, 1.78, 2.07, 2.49, 2.70}
	for range 30 {
		for r, v := range ms {
			f.step(r+1, time.Duration(v*1e6))
		}
	}
	tt, _ = f.curve(9)
	near("1 row, its mean", tt[1], 1.05e6)
	for r, v := range ms[1:] {
		if got := tt[r+2]; math.Abs(got-v*1e6) > 0.1e6 {
			t.Errorf("%d rows: %.0f ns, want within 0.1 ms of %.0f", r+2, got, v*1e6)
		}
	}
	if tt[9] <= tt[5] || tt[9] > 5e6 {
		t.Errorf("9 rows: %.0f ns, want along the line past 5 rows (%.0f)", tt[9], tt[5])
	}
	// A line through all five sizes would put 1 row 0.2 ms off.
	var all line
	for r, v := range ms {
		all.add(float64(r+1), v*1e6, 1)
	}
	if a, b, _, _ := all.fit(); math.Abs(a+b-1.05e6) < 0.1e6 {
		t.Errorf("one line %.0f + %.0f·rows fits 1 row within 0.1 ms: the case shows nothing", a, b)
	}

	// The first step of a size sizes buffers: it is not counted.
	before, _ := f.curve(12)
	f.step(12, 400*time.Millisecond)
	after, _ := f.curve(12)
	if after[12] != before[12] {
		t.Errorf("a first 12-row step of 400 ms moved 12 rows from %.0f to %.0f ns", before[12], after[12])
	}
	// A stall counts as at most twice what the step was expected to take.
	f.step(5, 200*time.Millisecond)
	after, _ = f.curve(12)
	if after[5] > before[5]*1.1 {
		t.Errorf("after a 200 ms stall, 5 rows: %.0f ns, want within 10 %% of %.0f", after[5], before[5])
	}
	f.step(1, 100*time.Millisecond)
	if after, _ = f.curve(12); after[1] > 1.05e6*1.1 {
		t.Errorf("after a 100 ms stall, 1 row: %.0f ns, want within 10 %% of 1050000 (the stall as 2.1 ms)", after[1])
	}
	// Never less than a smaller step.
	var m specCost
	for range 10 {
		m.step(1, 3*time.Millisecond)
		m.step(3, 2*time.Millisecond)
	}
	if tt, _ = m.curve(4); tt[2] != tt[1] || tt[4] != tt[1] {
		t.Errorf("curve %v: 1 row measured dearer than 3, want every size as dear as 1 row", tt)
	}
}

func TestDraftCost(t *testing.T) {
	if d, ok := (&draftSource{}).callCost(3); !ok || d != 0 {
		t.Errorf("prompt lookup's call: %.0f ns (ok %v), want none, known", d, ok)
	}
	c := &draftSource{call: &line{}}
	if _, ok := c.callCost(1); ok {
		t.Fatal("a draft cost from no calls")
	}
	// Calls of 4 passes only: 0.3 ms a pass, from the origin.
	for range 5 {
		c.called(4, 1200*time.Microsecond)
	}
	if d, ok := c.callCost(2); !ok || math.Abs(d-0.6e6) > 1 {
		t.Errorf("calls of 4 passes at 1.2 ms: 2 passes %.0f ns (ok %v), want 600000", d, ok)
	}
	// Calls of 1 and of 4 passes: a call's own 0.3 ms and 0.2 ms a pass.
	for range 50 {
		c.called(1, 500*time.Microsecond)
		c.called(4, 1100*time.Microsecond)
	}
	for k, want := range map[int]float64{0: 0, 1: 0.5e6, 2: 0.7e6, 4: 1.1e6} {
		if d, _ := c.callCost(k); math.Abs(d-want) > 0.02e6 {
			t.Errorf("a call of %d passes: %.0f ns, want %.0f", k, d, want)
		}
	}
	// A call that ran no pass is not timed.
	before, _ := c.callCost(4)
	c.called(0, time.Second)
	if after, _ := c.callCost(4); after != before {
		t.Errorf("a call of no pass moved 4 passes from %.0f to %.0f ns", before, after)
	}
}

// measured is a specCost that has timed steps of 1..9 rows at 1 ms +
// 0.05 ms a row, and a draft model's source whose calls took 0.25 ms a
// pass.
func measured() (*specCost, *draftSource) {
	c := &specCost{}
	for i := range 45 {
		rows := 1 + i%9
		c.step(rows, time.Duration(1000+50*rows)*time.Microsecond)
	}
	m := &draftSource{call: &line{}}
	m.called(1, 250*time.Microsecond)
	return c, m
}

// TestNextK walks a slot through steps: without measured costs it follows
// Hugging Face's schedule; with them, its acceptance and the costs choose.
func TestNextK(t *testing.T) {
	var c specCost
	model := &draftSource{call: &line{}}
	sl := &slotSpec{k: 5, src: model}
	c.nextK(sl, 5, 2, 5, 0)
	if sl.k != 4 {
		t.Errorf("no costs yet, a rejection: k %d, want 4 (one fewer)", sl.k)
	}
	c.nextK(sl, 4, 4, 5, 0)
	if sl.k != 5 {
		t.Errorf("no costs yet, all accepted: k %d, want 5 (two more, at most the max)", sl.k)
	}
	mc, mm := measured()
	c, *model = *mc, *mm
	// A run of drafts all accepted: α near 1, so the max.
	for range 10 {
		c.nextK(sl, sl.k, sl.k, 8, 0)
	}
	if sl.k != 8 {
		t.Errorf("every draft accepted (α %.2f): k %d, want 8", sl.alpha(), sl.k)
	}
	// Then every draft rejected: α falls, and drafting stops, alone too.
	for range 150 {
		c.nextK(sl, max(sl.k, 1), 0, 8, 0)
	}
	if sl.k != 0 {
		t.Errorf("every draft rejected (α %.2f): k %d, want 0", sl.alpha(), sl.k)
	}
	// Prompt lookup at the same acceptance costs no call: it drafts
	// more than the model would.
	lookup := &draftSource{}
	lk := &slotSpec{src: lookup, accepted: 2, rejections: 1}
	md := &slotSpec{src: model, accepted: 2, rejections: 1}
	c.nextK(lk, 2, 1, 8, 0)
	c.nextK(md, 2, 1, 8, 0)
	if lk.k <= md.k {
		t.Errorf("at α %.2f prompt lookup drafts %d and a model %d: want lookup more", lk.alpha(), lk.k, md.k)
	}
	// Each source keeps its own counts: lookup's are that one step's.
	if lookup.accepted != 1 || lookup.rejections != 1 || model.rejections < 10 {
		t.Errorf("counts: lookup %.2f accepted, %.2f rejections; the model %.2f rejections (want 1, 1, many)",
			lookup.accepted, lookup.rejections, model.rejections)
	}
	// Beside 7 other slots' rows a step's tokens cost little each: the
	// model's drafts (a pass 0.25 ms) no longer pay at α 0.75, nor
	// could they at α 1; prompt lookup could. Alone they do.
	alone, shared := &slotSpec{src: model, accepted: 3, rejections: 1}, &slotSpec{src: model, accepted: 3, rejections: 1}
	c.nextK(alone, 3, 3, 8, 0)
	c.nextK(shared, 3, 3, 8, 7)
	if alone.k < 1 || shared.k != 0 {
		t.Errorf("at α %.2f a slot alone drafts %d (want some), beside 7 rows %d (want 0)", alone.alpha(), alone.k, shared.k)
	}
	if k := c.probeK(model, 8, 7); k != 0 {
		t.Errorf("a model's probe beside 7 rows: %d, want 0 (none could pay)", k)
	}
	if k := c.probeK(model, 8, 0); k < 1 {
		t.Errorf("a model's probe alone: %d, want the fewest that could pay", k)
	}
	if k := c.probeK(lookup, 8, 7); k < 1 {
		t.Errorf("a lookup probe beside 7 rows: %d, want some", k)
	}
	if k := (&specCost{}).probeK(&draftSource{call: &line{}}, 6, 0); k != 6 {
		t.Errorf("a probe before any cost: %d, want the max 6", k)
	}
	// A new request starts from the α of the requests before it: after
	// the rejections above, few drafts; after a run of acceptances, the
	// max. From the prior alone it would draft 2 (α 0.6).
	first := &slotSpec{src: model}
	c.firstK(first, 8, 0)
	if !first.chosen || first.k > 1 {
		t.Errorf("a new request after every draft was rejected: k %d (α %.2f), want 0 or 1", first.k, first.alpha())
	}
	for range 60 {
		c.nextK(sl, 4, 4, 8, 0)
	}
	c.firstK(first, 8, 0)
	if first.k != 8 {
		t.Errorf("a new request after every draft was accepted: k %d (α %.2f), want 8", first.k, first.alpha())
	}
	pc, pm := measured()
	prior := &slotSpec{src: pm}
	pc.firstK(prior, 8, 0)
	if prior.k != 2 {
		t.Errorf("a new request from the prior alone: k %d (α %.2f), want 2", prior.k, prior.alpha())
	}
	// Before any cost is measured, a new request drafts the max.
	nw := &slotSpec{src: &draftSource{call: &line{}}}
	(&specCost{}).firstK(nw, 6, 0)
	if !nw.chosen || nw.k != 6 {
		t.Errorf("a new slot before any cost: drafts %d (chosen %v), want the max 6", nw.k, nw.chosen)
	}
	if (&specCost{}).choose(&slotSpec{src: &draftSource{call: &line{}}}, 8, 0) {
		t.Error("a choice from costs not yet measured")
	}
}

// TestDraftLen: at k 0 a slot drafts nothing but probeK's every probeEvery
// steps, asking only then; every slot drafts its max every maxProbeEvery.
func TestDraftLen(t *testing.T) {
	sl := &slotSpec{}
	asked := 0
	probe := func(k int) func() int { return func() int { asked++; return k } }
	for i := range maxProbeEvery - 1 {
		want := 0
		if (i+1)%probeEvery == 0 {
			want = 2
		}
		if k := sl.draftLen(8, probe(2)); k != want {
			t.Fatalf("step %d at k 0: drafts %d, want %d", i+1, k, want)
		}
	}
	if want := (maxProbeEvery - 1) / probeEvery; asked != want {
		t.Errorf("probeK asked %d times in %d steps, want %d", asked, maxProbeEvery-1, want)
	}
	if k := sl.draftLen(8, probe(2)); k != 8 {
		t.Errorf("step %d: drafts %d, want the max 8", maxProbeEvery, k)
	}
	// Where no probe could pay, nothing but the max every maxProbeEvery.
	n := 0
	for range 2 * maxProbeEvery {
		n += sl.draftLen(8, probe(0))
	}
	if n != 2*8 {
		t.Errorf("where no probe pays, %d tokens drafted in %d steps, want 16 (the max twice)", n, 2*maxProbeEvery)
	}
	// A slot at k 3 drafts 3, and its max every maxProbeEvery.
	at3 := &slotSpec{k: 3}
	n = 0
	for range maxProbeEvery {
		n += at3.draftLen(8, probe(1))
	}
	if n != 3*(maxProbeEvery-1)+8 {
		t.Errorf("a slot at k 3 drafted %d in %d steps, want %d", n, maxProbeEvery, 3*(maxProbeEvery-1)+8)
	}
}
