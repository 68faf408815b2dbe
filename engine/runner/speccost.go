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
// drafts, and each step drafts the k in 0..max (1..max alone; below) with
// the most tokens per second, E(k)/T(k). A draft that costs a quarter of
// its target's step drafts about 2 at α ≈ 0.65; prompt lookup, which
// costs nothing, drafts the max. Until a line is measured it falls back
// to Hugging Face's schedule (two more after a step whose drafts were all
// accepted, one fewer after one that rejected some).
//
// Slots decoding together share a step: with S of them, a slot's share of
// its base is a/S (a holds their sampling and attention too, as long as S
// stays put), and its drafts' rows and passes cost as much as alone. So
// the more slots, the less drafting pays, and with several k may be 0. A
// slot at k 0 learns nothing of α, so where drafting could pay (were every
// draft accepted) it drafts one token every probeEvery steps to keep α,
// and its choice, current. Alone, a slot drafts at least 1: its α stays
// measured, and a bad stretch of drafts does not stop it for long.

// Acceptance estimate, per slot: decayed counts of accepted drafts and of
// rejections (a rejection ends a step's run of trials, so α's estimate is
// accepted / (accepted + rejections)); the prior is one step's worth at
// priorAlpha.
const (
	alphaDecay = 0.9
	priorAlpha = 0.6
	// costDecay weighs a measured step or draft against the older ones.
	costDecay = 0.97
	// probeEvery: a slot whose k is 0 drafts 1 every this many steps.
	probeEvery = 8
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

// bestK is the k in least..maxK (least 0 or 1) that yields the most
// tokens per ns, E(k)/T(k), for a draft accepted at alpha, a draft pass of
// d ns and a step of a + b·rows ns (a: the slot's share of it).
func bestK(alpha float64, least, maxK int, d, a, b float64) int {
	best, bestRate := 1, -1.0
	if least == 0 && a+b > 0 {
		best, bestRate = 0, 1/(a+b)
	}
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
// costs no pass); share is how many slots decoded in the step.
func (c *specCost) nextK(sl *slot, drafted, accepted, maxK int, draftModel bool, share int) {
	sl.accepted = alphaDecay*sl.accepted + float64(accepted)
	if accepted < drafted {
		sl.rejections = alphaDecay*sl.rejections + 1
	} else {
		sl.rejections *= alphaDecay
	}
	switch {
	case c.choose(sl, maxK, draftModel, share):
	case accepted == drafted:
		sl.draftK = min(sl.draftK+2, maxK)
	default:
		sl.draftK = max(sl.draftK-1, 1)
	}
}

// choose sets sl's k from its α and the costs for one of share slots, and
// says whether the costs were measured (else it leaves k be).
func (c *specCost) choose(sl *slot, maxK int, draftModel bool, share int) bool {
	base, b, d, ok := c.costs(draftModel, share)
	if !ok {
		return false
	}
	least := 1
	if share > 1 {
		least = 0
	}
	sl.draftK, sl.idle = bestK(slotAlpha(sl), least, maxK, d, base, b), 0
	return true
}

// firstK sets a new request's k: from the costs and the prior α where they
// are measured, else the max.
func (c *specCost) firstK(sl *slot, maxK int, draftModel bool, share int) {
	if !c.choose(sl, maxK, draftModel, share) {
		sl.draftK = maxK
	}
	sl.kChosen = true
}

// costs are, once measured (ok), what a step costs one of share slots:
// base, its share of a, and b a row; and d a draft pass (0 for prompt
// lookup).
func (c *specCost) costs(draftModel bool, share int) (base, b, d float64, ok bool) {
	a, b, ok := c.line()
	if draftModel {
		d = c.draftNs
		ok = ok && c.draftW > 0
	}
	return a / float64(max(share, 1)), b, d, ok
}

// mayPay says whether drafting could pay for one of share slots if every
// draft were accepted; false only once the costs are measured.
func (c *specCost) mayPay(maxK int, draftModel bool, share int) bool {
	base, b, d, ok := c.costs(draftModel, share)
	return !ok || bestK(1, 0, maxK, d, base, b) > 0
}

// draftLen is how many tokens sl drafts this step: the k last chosen, or,
// while that is 0, one every probeEvery steps where mayPay (asked only
// then) says drafting could pay.
func (sl *slot) draftLen(mayPay func() bool) int {
	if sl.draftK > 0 {
		return sl.draftK
	}
	if sl.idle++; sl.idle < probeEvery || !mayPay() {
		return 0
	}
	sl.idle = 0
	return 1
}
