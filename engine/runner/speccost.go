package runner

import (
	"context"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Adaptive K. Drafting k tokens costs a call of the draft model, k
// passes, and makes the verifying step k rows longer; it gains the
// accepted drafts. With a draft accepted with probability α token by token
// (each token only if those before it were), a step yields on average
//
//	E(k) = 1 + α + α² + … + α^k
//
// tokens and takes D(k) + T(r+1+k): D(k) a draft call of k passes, T(rows)
// a step of the target and r the rows the step holds for other slots. The
// scheduler measures T as it goes (specCost), and D for each source whose
// drafts cost a call (draftSource), each slot its own α from its accepted
// and rejected drafts (slotSpec), and each step drafts the k in
// 0..max that yields the most tokens a second, (r + E(k)) / (D(k) +
// T(r+1+k)), the other slots' r rows counted as a token each.
//
// D is a line in k: a call's own cost (its first pass feeds the tokens
// accepted since the last call, and costs more than the rest) and a
// pass's. Charged as k passes alone, short drafts would look cheap and
// long ones dear. T is a 1-row step's mean, and a line in the rows of
// steps of 2 or more: on a CPU ggml computes one row as a matrix-vector
// product and several as a matrix product, and the second row can cost
// nearly a row's whole time (the KJV target in F16, 1.05 ms for 1 row and
// 1.78 ms for 2 on a 2-core EPYC, then 0.23 ms a row up to 2.70 ms for 5;
// in F32 1.95, 2.88, then 0.42 ms a row), which one line through all
// steps gets wrong. A line through the sizes of 2 or more, not each size
// on its own: a size seldom drafted is seldom timed, and a stall in its
// few steps would rule it out. Prompt lookup costs no call, so it drafts
// as long as rows are cheap.
//
// Where drafting does not pay, k is 0, alone as in a batch: speculation
// then costs next to nothing. A slot at k 0 learns nothing of α, so every
// probeEvery steps it drafts the fewest tokens that would pay were every
// draft accepted (none where none could), to keep α, and its choice,
// current. Until the costs are measured it follows Hugging Face's schedule
// (two more after a step whose drafts were all accepted, one fewer after
// one that rejected some).

// Acceptance estimate, per slot: decayed counts of accepted drafts and of
// rejections (a rejection ends a step's run of trials, so α's estimate is
// accepted / (accepted + rejections)); the prior is one step's worth at
// priorAlpha. A new request starts from the instance's counts for its
// source (draftSource), as if it went on from the requests before it: their drafts were
// accepted about as often, and from the prior alone a request would spend
// its first dozens of steps learning what the last one knew.
const (
	alphaDecay = 0.97
	priorAlpha = 0.6
	// costDecay weighs a measured step or draft against the older ones;
	// multiDecay a step of several rows, slower, so that the line keeps
	// the sizes of prefill and of long drafts while K stays put.
	costDecay  = 0.97
	multiDecay = 0.99
	// probeEvery: a slot whose k is 0 probes every this many steps;
	// maxProbeEvery: every slot drafts its max every this many.
	probeEvery    = 16
	maxProbeEvery = 128
	// seenRows: a step of up to this many rows is not counted the first
	// time its size runs (step).
	seenRows = 256
)

// specCost is the scheduler's measure of what the target's step costs
// by its rows (a source's draft call is its draftSource's). Run's
// goroutine alone uses it.
type specCost struct {
	// one is a 1-row step's decayed mean (oneW its weight); multi is a
	// step of 2 rows or more as a line in its rows
	one, oneW float64
	multi     line
	// seen says which sizes of step have run once (up to seenRows)
	seen [seenRows + 1]bool
}

// line is a decayed least-squares line y = a + b·x.
type line struct{ w, sx, sy, sxx, sxy float64 }

// add adds the point (x, y), the others weighing decay times what they
// did.
func (l *line) add(x, y, decay float64) {
	l.w, l.sx, l.sy = decay*l.w+1, decay*l.sx+x, decay*l.sy+y
	l.sxx, l.sxy = decay*l.sxx+x*x, decay*l.sxy+x*y
}

// fit is the line, ok once a point with x > 0 was added; sloped once
// points of different x were (before, it is the line through the origin
// and their mean).
func (l *line) fit() (a, b float64, sloped, ok bool) {
	if l.w == 0 || l.sx <= 0 {
		return 0, 0, false, false
	}
	mx, my := l.sx/l.w, l.sy/l.w
	vx := l.sxx/l.w - mx*mx
	if l.w < 2 || vx < 0.25 { // (nearly) one x: no slope to see
		return 0, my / mx, false, true
	}
	b = max((l.sxy/l.w-mx*my)/vx, 0)
	a = my - b*mx
	if a <= 0 {
		// Points that grow more than in proportion: all slope through
		// the mean.
		a, b = 0, my/mx
	}
	return a, b, true, true
}

// step records a step of rows that took d from submission to its samples.
// The first step of each size is not counted: it sizes the graph's
// buffers on every rank, and through a 3-rank pipeline took 3 times a
// later one. A stall (a collection, another process) is not a size's
// cost: a step counts as at most twice what it was expected to take.
func (c *specCost) step(rows int, d time.Duration) {
	if rows < 1 {
		return
	}
	if rows <= seenRows && !c.seen[rows] {
		c.seen[rows] = true
		return
	}
	y := float64(d.Nanoseconds())
	expect, ok := c.stepNs(rows)
	if rows == 1 && c.oneW > 0 {
		expect, ok = c.one, true // measured before the line is
	}
	if ok {
		y = min(y, 2*expect)
	}
	if rows == 1 {
		c.oneW = costDecay*c.oneW + 1
		c.one += (y - c.one) / c.oneW
		return
	}
	c.multi.add(float64(rows), y, multiDecay)
}

// stepModel is T: the 1-row mean (one), then the line a + b·rows of steps
// of 2 rows or more, never below one (b ≥ 0: the line rises with the
// rows); where those steps were all one size, the line from 1 row through
// their mean. ok once steps of 1 row and of more were measured, or steps
// of two sizes above 1: a slot that drafts in every step runs no 1-row
// step, and the line's 1 row stands in until K is 0 for a step.
func (c *specCost) stepModel() (a, b, one float64, ok bool) {
	a, b, sloped, ok := c.multi.fit()
	switch {
	case !ok || c.oneW == 0 && !sloped:
		return 0, 0, 0, false
	case !sloped:
		mx, my := c.multi.sx/c.multi.w, c.multi.sy/c.multi.w
		b = max((my-c.one)/(mx-1), 0)
		a = my - b*mx
	}
	one = a + b
	if c.oneW > 0 {
		one = c.one
	}
	return a, b, one, true
}

// stepAt is T(rows) for rows ≥ 1 from stepModel's terms.
func stepAt(a, b, one float64, rows int) float64 {
	if rows == 1 {
		return one
	}
	return max(a+b*float64(rows), one)
}

// stepNs is T(rows) in ns for rows ≥ 1, ok as stepModel.
func (c *specCost) stepNs(rows int) (float64, bool) {
	a, b, one, ok := c.stepModel()
	return stepAt(a, b, one, rows), ok
}

// curve is T(rows) in ns for rows 0..n (T(0) = 0), ok as stepModel.
func (c *specCost) curve(n int) ([]float64, bool) {
	a, b, one, ok := c.stepModel()
	if !ok {
		return nil, false
	}
	t := make([]float64, n+1)
	for r := 1; r <= n; r++ {
		t[r] = stepAt(a, b, one, r)
	}
	return t, true
}

// bestK is the k in 0..maxK that yields the most tokens per ns for a
// slot whose drafts are accepted at alpha, with draft calls of k passes
// costing dc[k] ns, beside other rows of the step (each counted as a
// token) and the step's time by rows t (len(t) > others+1+maxK).
func bestK(alpha float64, maxK int, dc []float64, others int, t []float64) int {
	r := float64(others)
	best, bestRate := 0, -1.0
	e, pow := 1.0, 1.0
	for k := 0; k <= maxK; k++ {
		if k > 0 {
			pow *= alpha
			e += pow
		}
		ns := dc[k] + t[others+1+k]
		if ns <= 0 {
			return maxK
		}
		if rate := (r + e) / ns; rate > bestRate*(1+1e-9) {
			best, bestRate = k, rate
		}
	}
	return best
}

// alpha is a slot's acceptance estimate.
func (ss *slotSpec) alpha() float64 {
	acc, rej := ss.accepted+priorAlpha, ss.rejections+(1-priorAlpha)
	return acc / (acc + rej)
}

// nextK sets ss's next draft length after a step that drafted drafted
// tokens and accepted accepted of them, for a request whose max is maxK;
// others is how many rows the step held for other slots.
func (c *specCost) nextK(ss *slotSpec, drafted, accepted, maxK, others int) {
	rejected := 0.0
	if accepted < drafted {
		rejected = 1
	}
	ss.accepted = alphaDecay*ss.accepted + float64(accepted)
	ss.rejections = alphaDecay*ss.rejections + rejected
	ss.src.accepted = alphaDecay*ss.src.accepted + float64(accepted)
	ss.src.rejections = alphaDecay*ss.src.rejections + rejected
	switch {
	case c.choose(ss, maxK, others):
	case accepted == drafted:
		ss.k = min(ss.k+2, maxK)
	default:
		ss.k = max(ss.k-1, 1)
	}
}

// choose sets ss's k from its α and the costs beside others' rows, and
// says whether the costs were measured (else it leaves k be).
func (c *specCost) choose(ss *slotSpec, maxK, others int) bool {
	t, dc, ok := c.costs(ss.src, maxK, others)
	if !ok {
		return false
	}
	ss.k, ss.idle = bestK(ss.alpha(), maxK, dc, others, t), 0
	return true
}

// firstK sets a new request's k: from the costs and the α its source's
// drafts had of late where they are measured, else the max.
func (c *specCost) firstK(ss *slotSpec, maxK, others int) {
	ss.accepted, ss.rejections = ss.src.accepted, ss.src.rejections
	if !c.choose(ss, maxK, others) {
		ss.k = maxK
	}
	ss.chosen = true
}

// costs are, once measured (ok), a step's time by rows up to others+1+maxK
// and a call of src by its passes up to maxK (0 for a source without
// calls, prompt lookup).
func (c *specCost) costs(src *draftSource, maxK, others int) (t, dc []float64, ok bool) {
	t, ok = c.curve(others + 1 + maxK)
	dc = make([]float64, maxK+1)
	for k := range dc {
		var dok bool
		dc[k], dok = src.callCost(k)
		ok = ok && dok
	}
	return t, dc, ok
}

// probeK is how many tokens a slot at k 0 drafts from src to learn its α
// again: the fewest that would pay were every draft accepted beside
// others' rows (a probe costs, and most of what it tells is in its first
// draft), 0 where none could pay; the max until the costs are measured.
func (c *specCost) probeK(src *draftSource, maxK, others int) int {
	t, dc, ok := c.costs(src, maxK, others)
	if !ok {
		return maxK
	}
	for k := 1; k <= maxK; k++ {
		if bestK(1, k, dc, others, t) == k {
			return k
		}
	}
	return 0
}

// draftLen is how many tokens ss drafts this step, for a request whose
// max is maxK: the k last chosen, or, while that is 0, probeK's every
// probeEvery steps (asked only then); and every maxProbeEvery steps of the
// slot (its requests one after another) the max, so that a long draft's
// cost is measured again (a step timed slow once, at a size seldom
// drafted, would else rule that size out for good).
func (ss *slotSpec) draftLen(maxK int, probeK func() int) int {
	if ss.sinceMax++; ss.sinceMax >= maxProbeEvery {
		ss.sinceMax = 0
		return maxK
	}
	if ss.k > 0 {
		return ss.k
	}
	if ss.idle++; ss.idle < probeEvery {
		return 0
	}
	ss.idle = 0
	return probeK()
}

// draftSource is a draft source requests may name: how a slot's drafter
// is made, and what adaptive K has measured of the source's drafts across
// requests. Run's goroutine alone uses it.
type draftSource struct {
	// drafter makes the drafter of a request speculating with sp in slot.
	drafter func(slot int, sp *runnerapi.Speculation) Drafter
	// call, for a source whose drafts cost a call of a model, is that
	// call's time in ns as a line in its passes (D(k)); nil where drafts
	// cost only the verifying step's rows (prompt lookup).
	call *line
	// accepted and rejections are every request's drafts from the source
	// and its rejections, decayed: a new request's α starts there.
	accepted, rejections float64
}

// called records a call of src that ran passes and took d.
func (src *draftSource) called(passes int, d time.Duration) {
	if passes > 0 && src.call != nil {
		src.call.add(float64(passes), float64(d.Nanoseconds()), costDecay)
	}
}

// callCost is a call of src of k passes in ns, ok once one was measured
// (0 and ok for a source without calls).
func (src *draftSource) callCost(k int) (float64, bool) {
	if src.call == nil {
		return 0, true
	}
	a, b, _, ok := src.call.fit()
	if k == 0 {
		return 0, ok
	}
	return a + b*float64(k), ok
}

// slotSpec is a slot's speculation: the drafter of its request while a
// speculating one runs, and adaptive K's state of the slot (speccost.go).
type slotSpec struct {
	// d drafts for the slot's request, from source src; both nil when the
	// request does not speculate, or none runs.
	d   Drafter
	src *draftSource
	// k is how many tokens to draft next, once chosen (firstK); idle
	// counts the steps since a probe while it is 0.
	k      int
	chosen bool
	idle   int
	// accepted and rejections are the slot's drafts and its rejections,
	// decayed.
	accepted, rejections float64
	// sinceMax counts the slot's steps since it last drafted its max.
	// It runs on across the slot's requests (reset keeps it): most end
	// before a max probe.
	sinceMax int
}

// reset starts the slot's speculation over for a request speculating
// with sp from src (nil, nil: none): a drafter of its own, and adaptive
// K's state afresh but for sinceMax.
func (ss *slotSpec) reset(slot int, sp *runnerapi.Speculation, src *draftSource) {
	*ss = slotSpec{sinceMax: ss.sinceMax}
	if src != nil {
		ss.d, ss.src = src.drafter(slot, sp), src
	}
}

// Drafter proposes drafts for one speculating request in one slot. Its
// methods run on the scheduler's goroutine, one call at a time, between
// steps.
type Drafter interface {
	// Draft proposes up to k tokens (k ≥ 0; fewer or none is fine) to
	// follow hist: the slot's cached tokens, then its pending one. hist
	// is the scheduler's, not to be kept. passes is how many forward
	// passes of a model the call ran (0 for a source that runs none),
	// which adaptive K times as the source's call.
	Draft(ctx context.Context, hist []int32, k int) (drafts []int32, passes int, err error)
}
