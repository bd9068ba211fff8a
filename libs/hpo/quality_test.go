package hpo_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/loom-ml/loom/libs/hpo"
	"github.com/loom-ml/loom/libs/hpo/testfuncs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// logRegret is log10 of the gap between the best value found and the
// optimum (floored at 1e-9).
func logRegret(f testfuncs.Func, best float64) float64 {
	return math.Log10(max(best-f.Optimum, 1e-9))
}

// meanLogRegret runs seeds studies of f with alg for budget trials.
func meanLogRegret(tb testing.TB, f testfuncs.Func, alg trainingv1.StudySpec_Algorithm, budget, batch int, seeds []int64) float64 {
	tb.Helper()
	sum := 0.0
	for _, seed := range seeds {
		trace, err := testfuncs.Run(f, alg, seed, budget, batch)
		if err != nil {
			tb.Fatal(err)
		}
		if len(trace) != budget {
			tb.Fatalf("%s: %d trials, want %d", f.Name, len(trace), budget)
		}
		sum += logRegret(f, trace[len(trace)-1])
	}
	return sum / float64(len(seeds))
}

// TestDefaultBeatsRandomSearch runs every test function for 50 trials with
// 5 seeds and asserts that Bayesian optimisation (the default) ends closer
// to the optimum than random search on each function on average over the
// seeds, and by at least a decade averaged over the functions. It is a
// real measurement: a worse optimiser fails it.
func TestDefaultBeatsRandomSearch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 60 studies")
	}
	t.Parallel()
	seeds := []int64{1, 2, 3, 4, 5}
	total := 0.0
	for _, f := range testfuncs.All() {
		bo := meanLogRegret(t, f, trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, 50, 1, seeds)
		rs := meanLogRegret(t, f, trainingv1.StudySpec_RANDOM_SEARCH, 50, 1, seeds)
		t.Logf("%-18s 50 trials, mean log10 regret over %d seeds: default %6.2f, random %6.2f", f.Name, len(seeds), bo, rs)
		if !(bo < rs) {
			t.Errorf("%s: default %.2f is not better than random search %.2f", f.Name, bo, rs)
		}
		total += rs - bo
	}
	if avg := total / float64(len(testfuncs.All())); avg < 1 {
		t.Errorf("default beats random search by %.2f decades of regret on average, want ≥ 1", avg)
	}
}

// TestBatchesStillConverge: with 4 suggestions per batch (parallel trials)
// the default still beats random search clearly on Branin and Hartmann-6.
func TestBatchesStillConverge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 12 studies")
	}
	t.Parallel()
	seeds := []int64{1, 2, 3}
	for _, f := range []testfuncs.Func{testfuncs.Branin(), testfuncs.Hartmann6()} {
		bo := meanLogRegret(t, f, trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, 48, 4, seeds)
		rs := meanLogRegret(t, f, trainingv1.StudySpec_RANDOM_SEARCH, 48, 4, seeds)
		t.Logf("%-18s 48 trials in batches of 4: default %6.2f, random %6.2f", f.Name, bo, rs)
		if !(bo < rs-0.5) {
			t.Errorf("%s in batches: default %.2f vs random %.2f, want half a decade better", f.Name, bo, rs)
		}
	}
}

// BenchmarkStudy runs a study per iteration (seed = iteration) on each test
// function and budget and reports the mean log10 regret reached, for
// comparison with Optuna (bench/cmd/hpobench):
//
//	go test -run XXX -bench Study -benchtime 10x ./libs/hpo/
func BenchmarkStudy(b *testing.B) {
	for _, f := range testfuncs.All() {
		for _, budget := range []int{50, 100} {
			for _, alg := range []trainingv1.StudySpec_Algorithm{trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, trainingv1.StudySpec_RANDOM_SEARCH} {
				name := "default"
				if alg == trainingv1.StudySpec_RANDOM_SEARCH {
					name = "random"
				}
				b.Run(fmt.Sprintf("%s/%d/%s", f.Name, budget, name), func(b *testing.B) {
					sum, n := 0.0, 0
					for b.Loop() {
						n++
						sum += meanLogRegret(b, f, alg, budget, 1, []int64{int64(n)})
					}
					b.ReportMetric(sum/float64(n), "log10-regret")
				})
			}
		}
	}
}

// TestDefaultHandlesMixedSpaces: on a space with a log-scaled double, an
// integer, a discrete list and a categorical with conditional children,
// the default still finds better trials than random search.
func TestDefaultHandlesMixedSpaces(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 studies")
	}
	t.Parallel()
	best := func(alg trainingv1.StudySpec_Algorithm) float64 {
		sum := 0.0
		for seed := int64(1); seed <= 4; seed++ {
			s := mustNew(t, mixedSpec(alg), hpo.Options{Seed: seed})
			trials := runStudy(t, s, 40, 1)
			v, _ := s.Objective(trials[s.Best(trials)])
			sum += v
		}
		return sum / 4
	}
	bo, rs := best(trainingv1.StudySpec_ALGORITHM_UNSPECIFIED), best(trainingv1.StudySpec_RANDOM_SEARCH)
	t.Logf("mixed space, 40 trials, mean best loss over 4 seeds: default %.4f, random %.4f (optimum 0.001)", bo, rs)
	if !(bo < rs) {
		t.Errorf("default %.4f is not better than random search %.4f on the mixed space", bo, rs)
	}
}
