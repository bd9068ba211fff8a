package domain

import (
	"math"
	"testing"
)

// TestRoundHalfAway pins the priority factors' rounding: to the nearest
// integer, halves away from zero (not to even, not truncated), and a value
// just below a half rounds down.
func TestRoundHalfAway(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		x    float64
		want int64
	}{
		{0, 0}, {0.5, 1}, {1.5, 2}, {2.5, 3}, {-0.5, -1}, {-2.5, -3},
		{math.Nextafter(0.5, 0), 0}, {999.4999, 999}, {9999.5, 10000},
		{1000 * (1.0 / 3), 333}, {10000 * math.Exp2(-0.5), 7071},
	} {
		if got := roundHalfAway(c.x); got != c.want {
			t.Errorf("roundHalfAway(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}
