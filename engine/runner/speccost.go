package runner

import "time"

// Adaptive K. Drafting k tokens costs k draft passes, and makes the
// verifying step k rows longer; it gains the accepted drafts. With a
// draft accepted with probability α token by token (each token only if
// those before it were), a step yields on average
//
//	E(k) = 1 + α + α² + … + α^k
//
// tokens and takes T(k) = k·d + a + b·(k+1): d a draft pass, a + b·rows a
// step of the target. The scheduler measures d and the line a + b·rows as
// it goes (specCost), each slot its own α from its accepted and rejected
// drafts, and each step drafts the k in 1..max with the most tokens per
// second, E(k)/T(k). A draft that costs a quarter of its target's step
// drafts about 2 at α ≈ 0.65; prompt lookup, which costs nothing, drafts
// the max. Until a line is measured it falls back to Hugging Face's
// schedule (two more after a step whose drafts were all accepted, one
// fewer after one that rejected some).

// Acceptance estimate, per slot: decayed counts of accepted drafts and of
// rejections (a rejection ends a step's run of trials, so α's estimate is
// accepted / (accepted + rejections)); the prior is one step's worth at
// priorAlpha.
const (
	alphaDecay = 0.9
	priorAlpha = 0.6
	// costDecay weighs a measured step or draft against the older ones.
	costDecay = 0.97
)

// specCost is the scheduler's measure of what speculation costs: a draft
// model's pass and the target's step as a line in its rows. Run's
// goroutine alone uses it.
type specCost struct {
	draftNs float64 // a draft model's pass, decayed mean
	draftW  float64
	// decayed sums of steps' (rows, ns), for the least-squares line
	w, sx, sy, sxx, sxy float64
}

// step records a step of rows that took d from submission to its samples.
func (c *specCost) step(rows int, d time.Duration) {
	x, y := float64(rows), float64(d.Nanoseconds())
	c.w, c.sx, c.sy = costDecay*c.w+1, costDecay*c.sx+x, costDecay*c.sy+y
	c.sxx, c.sxy = costDecay*c.sxx+x*x, costDecay*c.sxy+x*y
}

// draft records passes of a draft model that took d.
func (c *specCost) draft(passes int, d time.Duration) {
	if passes <= 0 {
		return
	}
	c.draftNs = (costDecay*c.draftW*c.draftNs + float64(d.Nanoseconds())) / (costDecay*c.draftW + float64(passes))
	c.draftW = costDecay*c.draftW + float64(passes)
}

// line is a step's time in ns as a + b·rows; ok once steps of different
// sizes have been measured (a step of prefill and one of decode do).
func (c *specCost) line() (a, b float64, ok bool) {
	if c.w < 2 {
		return 0, 0, false
	}
	mx, my := c.sx/c.w, c.sy/c.w
	vx := c.sxx/c.w - mx*mx
	if vx < 0.25 { // all steps (nearly) one size: no slope to see
		return 0, 0, false
	}
	b = max((c.sxy/c.w-mx*my)/vx, 0)
	a = my - b*mx
	if a <= 0 {
		// Rows that cost more than in proportion: take the step as all
		// slope through the mean.
		a, b = 0, my/mx
	}
	return a, b, true
}

// bestK is the k in 1..maxK that yields the most tokens per ns, E(k)/T(k),
// for a draft accepted at alpha, a draft pass of d ns and a step of
// a + b·rows ns.
func bestK(alpha float64, maxK int, d, a, b float64) int {
	best, bestRate := 1, -1.0
	e, pow := 1.0, 1.0
	for k := 1; k <= maxK; k++ {
		pow *= alpha
		e += pow
		t := float64(k)*d + a + b*float64(k+1)
		if t <= 0 {
			return maxK
		}
		if r := e / t; r > bestRate*(1+1e-9) {
			best, bestRate = k, r
		}
	}
	return best
}

// slotAlpha is a slot's acceptance estimate.
func slotAlpha(sl *slot) float64 {
	acc, rej := sl.accepted+priorAlpha, sl.rejections+(1-priorAlpha)
	return acc / (acc + rej)
}

// nextK sets sl's next draft length after a step that drafted drafted
// tokens and accepted accepted of them, for a request whose max is maxK;
// draftModel says the drafts came from a model (else prompt lookup, which
// costs no pass).
func (c *specCost) nextK(sl *slot, drafted, accepted, maxK int, draftModel bool) {
	sl.accepted = alphaDecay*sl.accepted + float64(accepted)
	if accepted < drafted {
		sl.rejections = alphaDecay*sl.rejections + 1
	} else {
		sl.rejections *= alphaDecay
	}
	a, b, ok := c.line()
	d := 0.0
	if draftModel {
		d = c.draftNs
		ok = ok && c.draftW > 0
	}
	switch {
	case ok:
		sl.draftK = bestK(slotAlpha(sl), maxK, d, a, b)
	case accepted == drafted:
		sl.draftK = min(sl.draftK+2, maxK)
	default:
		sl.draftK = max(sl.draftK-1, 1)
	}
}
