package grammar

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// intRange is the rule for the integers in [lo, hi] (either end may be
// open: hasLo/hasHi false), without leading zeros. It follows the usual
// numeric-range-to-pattern split: [lo, hi] cut into pieces whose bounds
// share a prefix and then run 0…0 to 9…9, each piece one digit pattern.
func (c *schemaCompiler) intRange(lo, hi int64, hasLo, hasHi bool) (seq, error) {
	if !hasLo && !hasHi {
		return c.integer()
	}
	// Open ends become the widest values of maxIntDigits digits.
	widest := int64(math.Pow10(maxIntDigits)) - 1
	if !hasLo {
		lo = -widest
	}
	if !hasHi {
		hi = widest
	}
	var alts []seq
	if lo < 0 {
		// -1 … -m, as "-" then 1 … m.
		for _, p := range digitPatterns(uint64(max(1, -min(hi, -1))), uint64(-lo)) {
			alts = append(alts, cat(c.b.lit("-"), c.pattern(p)))
		}
	}
	if hi >= 0 {
		for _, p := range digitPatterns(uint64(max(lo, 0)), uint64(hi)) {
			alts = append(alts, c.pattern(p))
		}
	}
	return c.b.alt(alts...)
}

// pattern is one digit range per position.
func (c *schemaCompiler) pattern(p [][2]byte) seq {
	var out seq
	for _, d := range p {
		var s byteSet
		s.addRange(d[0], d[1])
		out = append(out, c.b.set(s)...)
	}
	return out
}

// digitPatterns covers [a, b] (a ≤ b) with digit patterns.
func digitPatterns(a, b uint64) [][][2]byte {
	var out [][][2]byte
	start := a
	for _, stop := range splitStops(a, b) {
		s, e := strconv.FormatUint(start, 10), strconv.FormatUint(stop, 10)
		var p [][2]byte
		for i := range len(s) { // same length: the stops split at 9, 99, …
			p = append(p, [2]byte{s[i], e[i]})
		}
		out = append(out, p)
		start = stop + 1
	}
	return out
}

// splitStops are the ends of the pieces of [a, b]: a with its last k
// digits turned to 9, and b+1 with its last k digits turned to 0, minus 1.
func splitStops(a, b uint64) []uint64 {
	stops := []uint64{b}
	for k := 1; ; k++ {
		s := ninesFrom(a, k)
		if s < a || s > b {
			break
		}
		stops = append(stops, s)
	}
	for k := 1; ; k++ {
		s := zerosFrom(b+1, k)
		if s == 0 || s-1 < a || s-1 > b {
			break
		}
		stops = append(stops, s-1)
	}
	slices.Sort(stops)
	return slices.Compact(stops)
}

func ninesFrom(x uint64, k int) uint64 {
	p := uint64(math.Pow10(k))
	return x/p*p + p - 1
}

func zerosFrom(x uint64, k int) uint64 {
	p := uint64(math.Pow10(k))
	return x / p * p
}

// intBounds reads minimum, maximum and their exclusive forms as integer
// bounds (a fractional bound rounds inwards).
func (c *schemaCompiler) intBounds(s *object, ptr string) (lo, hi int64, hasLo, hasHi bool, err error) {
	read := func(k string) (float64, bool, error) {
		v, ok := s.get(k)
		if !ok {
			return 0, false, nil
		}
		n, isNum := v.(json.Number)
		f, ferr := n.Float64()
		if !isNum || ferr != nil || math.Abs(f) > math.Pow10(maxIntDigits)-1 {
			return 0, false, c.fail(ptr+"/"+k, "want a number of at most %d digits", maxIntDigits)
		}
		return f, true, nil
	}
	bound := func(k, xk string, inclusive, exclusive func(float64) float64, tighter func(a, b float64) float64) (int64, bool, error) {
		a, okA, err := read(k)
		if err != nil {
			return 0, false, err
		}
		x, okX, err := read(xk)
		if err != nil {
			return 0, false, err
		}
		switch {
		case okA && okX:
			return int64(tighter(inclusive(a), exclusive(x))), true, nil
		case okA:
			return int64(inclusive(a)), true, nil
		case okX:
			return int64(exclusive(x)), true, nil
		}
		return 0, false, nil
	}
	lo, hasLo, err = bound("minimum", "exclusiveMinimum", math.Ceil, func(x float64) float64 { return math.Floor(x) + 1 }, math.Max)
	if err != nil {
		return
	}
	hi, hasHi, err = bound("maximum", "exclusiveMaximum", math.Floor, func(x float64) float64 { return math.Ceil(x) - 1 }, math.Min)
	if err != nil {
		return
	}
	if hasLo && hasHi && lo > hi {
		err = c.fail(ptr, "no integer lies between minimum %d and maximum %d", lo, hi)
	}
	return
}
