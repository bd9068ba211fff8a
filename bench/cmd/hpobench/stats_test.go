package main

import (
	"math"
	"testing"
)

func TestMannWhitney(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		a, b []float64
		u, p float64
		tolP float64
	}{
		// Fully separated, 3 and 3: U = 9, the one most extreme of C(6,3)
		// = 20 orders on each side: p = 2/20.
		{"separated 3x3", []float64{1, 2, 3}, []float64{4, 5, 6}, 9, 0.1, 1e-12},
		{"separated reversed", []float64{4, 5, 6}, []float64{1, 2, 3}, 0, 0.1, 1e-12},
		// 5 and 5 separated: 2/C(10,5) = 2/252.
		{"separated 5x5", []float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 25, 2.0 / 252, 1e-12},
		// Interleaved evenly: U = n1·n2/2 exactly, p = 1.
		{"interleaved", []float64{1, 4, 5, 8}, []float64{2, 3, 6, 7}, 8, 1, 1e-12},
		// A tie (3 and 3): a's pairs below b = 4+4+3.5+3 = 14.5; normal
		// approximation, mean 8, tie-corrected variance 16/12·(9 - 6/56),
		// continuity correction: z = 6/3.4434, p = erfc(z/√2) = 0.081429
		//.
		{"ties", []float64{1, 2, 3, 4}, []float64{3, 5, 6, 7}, 14.5, 0.08142910235989113, 1e-9},
	} {
		u, p := mannWhitney(c.a, c.b)
		if u != c.u || math.Abs(p-c.p) > c.tolP {
			t.Errorf("%s: U, p = %v, %v; want %v, %v", c.name, u, p, c.u, c.p)
		}
	}
}

// TestExactMatchesNormal: for larger samples the exact p-value is close to
// the normal approximation's, and the distribution sums to C(n1+n2, n1).
func TestExactMatchesNormal(t *testing.T) {
	t.Parallel()
	d := uDist(20, 20)
	total := 0.0
	for _, c := range d {
		total += c
	}
	if want := 137846528820.0; total != want {
		t.Errorf("orders of 20 and 20 = %v, want C(40,20) = %v", total, want)
	}
	// U = 280 of 400 (mean 200, sd sqrt(20·20·41/12) = 36.97): z = (80-0.5)/36.97.
	exact := exactMWP(20, 20, 280)
	normal := math.Erfc((80 - 0.5) / math.Sqrt(400*41.0/12) / math.Sqrt2)
	if math.Abs(exact-normal) > 0.002 {
		t.Errorf("exact p %v, normal %v", exact, normal)
	}
}

func TestMeanSDQuantile(t *testing.T) {
	t.Parallel()
	m, sd := meanSD([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if m != 5 || math.Abs(sd-2.138089935299395) > 1e-12 {
		t.Errorf("meanSD = %v, %v", m, sd)
	}
	if q := quantile([]float64{4, 1, 3, 2}, 0.5); q != 2.5 {
		t.Errorf("median = %v, want 2.5", q)
	}
	if q := quantile([]float64{1, 2, 3}, 1); q != 3 {
		t.Errorf("max = %v, want 3", q)
	}
}
