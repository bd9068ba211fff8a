// Package hpo is Loom's hyperparameter search: a pure, seeded function of a
// study spec and the trials so far. It does no I/O and reads no clock, so
// the training service can replay it after a restart and get the same
// decisions, and the benchmarks can run it in-process.
//
// SEAM (issue 15): this file fixes the API; the first implementation is
// random search for every algorithm, to be replaced by the real algorithms
// (Bayesian optimisation as the default, grid, random; median stopping and
// ASHA).
package hpo

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"google.golang.org/protobuf/types/known/structpb"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// Options are a search's settings beyond its spec.
type Options struct {
	// Seed seeds every random choice; the same spec, seed and trials give
	// the same suggestions.
	Seed int64
	// MaxTrials is the study's trial budget (max_trial_count): a grid is
	// laid out to fit it.
	MaxTrials int
}

// Searcher suggests trials and decides early stopping for one study. It is
// immutable after New and safe for concurrent use.
type Searcher struct {
	spec *trainingv1.StudySpec
	opts Options
}

// New compiles spec; an invalid spec is an error naming the field
// (errs.InvalidArgument).
func New(spec *trainingv1.StudySpec, opts Options) (*Searcher, error) {
	if spec == nil || len(spec.GetParameters()) == 0 {
		return nil, errors.New("study_spec.parameters: at least one is required")
	}
	if len(spec.GetMetrics()) == 0 {
		return nil, errors.New("study_spec.metrics: one is required")
	}
	return &Searcher{spec: spec, opts: opts}, nil
}

// Suggest returns the parameters of the next n trials (ids len(trials)+1
// ..), given every trial so far in id order, whatever their state: REQUESTED
// and ACTIVE trials count as pending points, so that a batch does not land
// on one point. It returns fewer than n when the space is exhausted (a
// grid). It is deterministic in (spec, seed, trials, n).
func (s *Searcher) Suggest(trials []*trainingv1.Trial, n int) ([][]*trainingv1.Trial_Parameter, error) {
	out := make([][]*trainingv1.Trial_Parameter, 0, n)
	for i := range n {
		rng := s.rng(len(trials) + i + 1)
		var ps []*trainingv1.Trial_Parameter
		for _, p := range s.spec.GetParameters() {
			ps = append(ps, &trainingv1.Trial_Parameter{ParameterId: p.GetParameterId(), Value: sample(p, rng)})
		}
		out = append(out, ps)
	}
	return out, nil
}

// rng is the random source of trial id's suggestion.
func (s *Searcher) rng(id int) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", s.opts.Seed, id)
	return rand.New(rand.NewPCG(h.Sum64(), uint64(id)))
}

func sample(p *trainingv1.StudySpec_ParameterSpec, rng *rand.Rand) *structpb.Value {
	switch v := p.GetParameterValueSpec().(type) {
	case *trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_:
		lo, hi := v.DoubleValueSpec.GetMinValue(), v.DoubleValueSpec.GetMaxValue()
		if p.GetScaleType() == trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE && lo > 0 {
			return structpb.NewNumberValue(math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo))))
		}
		return structpb.NewNumberValue(lo + rng.Float64()*(hi-lo))
	case *trainingv1.StudySpec_ParameterSpec_IntegerValueSpec_:
		lo, hi := v.IntegerValueSpec.GetMinValue(), v.IntegerValueSpec.GetMaxValue()
		return structpb.NewNumberValue(float64(lo + rng.Int64N(hi-lo+1)))
	case *trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec_:
		vs := v.CategoricalValueSpec.GetValues()
		return structpb.NewStringValue(vs[rng.IntN(len(vs))])
	case *trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec_:
		vs := v.DiscreteValueSpec.GetValues()
		return structpb.NewNumberValue(vs[rng.IntN(len(vs))])
	}
	return structpb.NewNullValue()
}

// Objective returns trial t's objective value for the study's first metric
// (its final measurement, or per measurement_selection_type its last or
// best measurement) and whether it has one.
func (s *Searcher) Objective(t *trainingv1.Trial) (float64, bool) {
	id := s.spec.GetMetrics()[0].GetMetricId()
	for _, m := range t.GetFinalMeasurement().GetMetrics() {
		if m.GetMetricId() == id {
			return m.GetValue(), true
		}
	}
	return 0, false
}

// Better reports whether objective a is better than b under the first
// metric's goal.
func (s *Searcher) Better(a, b float64) bool {
	if s.spec.GetMetrics()[0].GetGoal() == trainingv1.StudySpec_MetricSpec_MAXIMIZE {
		return a > b
	}
	return a < b
}

// Best returns the index in trials of the best SUCCEEDED trial, or -1.
func (s *Searcher) Best(trials []*trainingv1.Trial) int {
	best, bv := -1, 0.0
	for i, t := range trials {
		if t.GetState() != trainingv1.Trial_SUCCEEDED {
			continue
		}
		if v, ok := s.Objective(t); ok && (best < 0 || s.Better(v, bv)) {
			best, bv = i, v
		}
	}
	return best
}

// ShouldStop reports whether the study's automated stopping stops trial
// trials[i] (ACTIVE, with intermediate measurements) now, with the reason
// a person reads in the trial. Without a stopping spec it is always false.
func (s *Searcher) ShouldStop(trials []*trainingv1.Trial, i int) (bool, string) {
	return false, ""
}
