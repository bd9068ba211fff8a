package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/loom-ml/loom/libs/hpo/testfuncs"
)

// TestFuncsAtOptimum: each function takes its published minimum at its
// published minimiser, and no random point of its box beats it, which
// catches a mistyped constant.
func TestFuncsAtOptimum(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range testFuncs() {
		if got := f.f(f.xopt); math.Abs(got-f.fopt) > 1e-4*math.Max(1, math.Abs(f.fopt)) {
			t.Errorf("%s(%v) = %v, want the optimum %v", f.name, f.xopt, got, f.fopt)
		}
		x := make([]float64, f.dim())
		for range 20000 {
			for i := range x {
				x[i] = f.lo[i] + rng.Float64()*(f.hi[i]-f.lo[i])
			}
			if v := f.f(x); v < f.fopt-1e-6 {
				t.Fatalf("%s(%v) = %v, below the optimum %v", f.name, x, v, f.fopt)
			}
		}
	}
}

// TestFuncsKnownValues pins values away from the optimum, from the
// functions' definitions (Surjanovic & Bingham's library).
func TestFuncsKnownValues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		f    func([]float64) float64
		x    []float64
		want float64
	}{
		{"Branin other minimum", testfuncs.Branin().F, []float64{-math.Pi, 12.275}, 0.39788735772973816},
		{"Branin origin", testfuncs.Branin().F, []float64{0, 0}, 55.602112642270262},
		{"Goldstein-Price origin", testfuncs.GoldsteinPrice().F, []float64{0, 0}, 600},
		{"six-hump camel origin", testfuncs.SixHumpCamel().F, []float64{0, 0}, 0},
		{"six-hump camel other minimum", testfuncs.SixHumpCamel().F, []float64{-0.08984201368301331, 0.7126564032704135}, -1.0316284534898774},
		{"Styblinski-Tang origin", testfuncs.StyblinskiTang(4).F, []float64{0, 0, 0, 0}, 0},
		{"Styblinski-Tang ones", testfuncs.StyblinskiTang(2).F, []float64{1, 1}, -10},
	} {
		if got := c.f(c.x); math.Abs(got-c.want) > 1e-9*math.Max(1, math.Abs(c.want)) {
			t.Errorf("%s: f(%v) = %v, want %v", c.name, c.x, got, c.want)
		}
	}
}
