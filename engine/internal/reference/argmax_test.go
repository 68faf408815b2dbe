package reference

import "testing"

func TestArgmax(t *testing.T) {
	for _, c := range []struct {
		x    []float64
		want int
	}{{[]float64{1}, 0}, {[]float64{-3, 2, 7, 7, -1}, 2}, {[]float64{5, 1, 4}, 0}, {[]float64{-2, -1}, 1}} {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
	if got := Argmax([]float32{0.5, 0.25, 0.75}); got != 2 {
		t.Errorf("Argmax of float32 = %d, want 2", got)
	}
}
