package testfuncs

import (
	"math"
	"testing"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

func TestKnownOptima(t *testing.T) {
	t.Parallel()
	for _, f := range append(All(), StyblinskiTang(2)) {
		if len(f.Argmin) != f.Dim() || len(f.Upper) != f.Dim() {
			t.Fatalf("%s: dimensions %d/%d/%d", f.Name, len(f.Lower), len(f.Upper), len(f.Argmin))
		}
		if v := f.F(f.Argmin); math.Abs(v-f.Optimum) > 1e-4*math.Max(1, math.Abs(f.Optimum)) {
			t.Errorf("%s(%v) = %v, want the optimum %v", f.Name, f.Argmin, v, f.Optimum)
		}
		// Nothing on a coarse grid of the box is below the optimum.
		x := make([]float64, f.Dim())
		var walk func(d int)
		walk = func(d int) {
			if d == f.Dim() {
				if v := f.F(x); v < f.Optimum-1e-6 {
					t.Errorf("%s(%v) = %v, below the optimum %v", f.Name, x, v, f.Optimum)
				}
				return
			}
			steps := 40
			if f.Dim() > 3 {
				steps = 6
			}
			for k := 0; k <= steps; k++ {
				x[d] = f.Lower[d] + (f.Upper[d]-f.Lower[d])*float64(k)/float64(steps)
				walk(d + 1)
			}
		}
		walk(0)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	trace, err := Run(Branin(), trainingv1.StudySpec_RANDOM_SEARCH, 1, 20, 3)
	if err != nil || len(trace) != 20 {
		t.Fatalf("Run = %d values, %v", len(trace), err)
	}
	for i := 1; i < len(trace); i++ {
		if trace[i] > trace[i-1] {
			t.Fatalf("best-so-far trace rises at %d: %v", i, trace)
		}
	}
}
