package reference

// Argmax is the greedy token of a row of logits: the index of the largest
// value, the first among equals. Tests compare it between the ggml path
// and this reference (and between ranks).
func Argmax[T float32 | float64](x []T) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
