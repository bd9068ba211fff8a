package domain

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
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

// TestAgeSteps: the weighted age factor read from ageSteps (and kept
// across ages, as sumIn keeps it per job) is the rounded expression's, to
// the bit, at every step and next to it, for several weights and MaxAges,
// also ages going back and past MaxAge.
func TestAgeSteps(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		w      int64
		maxAge time.Duration
	}{
		{DefaultWeightAge, DefaultMaxAge}, {1, time.Hour}, {3, 7 * time.Second}, {1000, 1},
		{777, 3*24*time.Hour + 17}, {maxAgeSteps, 14 * 24 * time.Hour}, {10000, 999 * time.Millisecond},
	} {
		steps := ageSteps(c.w, c.maxAge)
		if steps == nil {
			t.Fatalf("w %d, max age %v: no steps", c.w, c.maxAge)
		}
		want := func(d int64) int64 {
			return roundHalfAway(float64(c.w) * min(float64(d)/float64(c.maxAge), 1))
		}
		in := prioIn{age: -1}
		check := func(d int64) {
			if d <= 0 {
				return
			}
			if got := int64(ageLevel(steps, d)); got != want(d) {
				t.Fatalf("w %d, max age %v, age %d: level %d, want %d", c.w, c.maxAge, d, got, want(d))
			}
			// As sumIn keeps it: from the last age's value.
			a := int32(in.age)
			if a < 0 || int(a) >= len(steps)-1 || d < steps[a] || d >= steps[a+1] {
				a = ageLevel(steps, d)
				in.age = int16(a)
			}
			if int64(a) != want(d) {
				t.Fatalf("w %d, max age %v, age %d: kept level %d, want %d", c.w, c.maxAge, d, a, want(d))
			}
		}
		for v := int64(1); v <= c.w; v += 1 + c.w/500 {
			for _, d := range []int64{steps[v] - 1, steps[v], steps[v] + 1} {
				check(d)
			}
		}
		for range 2000 {
			check(1 + rng.Int64N(int64(c.maxAge)*2))
		}
		check(math.MaxInt64)
	}
	for _, bad := range []int64{0, -1, maxAgeSteps + 1} {
		if ageSteps(bad, time.Hour) != nil {
			t.Errorf("weight %d: steps made", bad)
		}
	}
}
