// Package hpo is Loom's hyperparameter search: a pure, seeded function of a
// study spec and the trials so far. It does no I/O and reads no clock, so
// the training service can replay it after a restart and get the same
// decisions, and the benchmarks can run it in-process.
//
// Algorithms (study_spec.algorithm): ALGORITHM_UNSPECIFIED is Bayesian
// optimisation (a Gaussian process with a Matérn 5/2 ARD kernel and
// expected improvement, after a quasi-random start); GRID_SEARCH walks a
// grid laid out to fit the trial budget; RANDOM_SEARCH samples each
// parameter uniformly in its scaled space. Automated stopping: median
// stopping (also used for decay-curve stopping) and ASHA. README.md in
// this directory describes them, their determinism and their limits.
package hpo

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/loom-ml/loom/libs/errs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// DefaultGridBudget is the grid size when Options.MaxTrials is not set
// (the largest max_trial_count a tuning job may have).
const DefaultGridBudget = 1000

// Options are a search's settings beyond its spec.
type Options struct {
	// Seed seeds every random choice; the same spec, seed and trials give
	// the same suggestions. Zero takes study_spec.seed.
	Seed int64
	// MaxTrials is the study's trial budget (max_trial_count): a grid is
	// laid out to fit it (DefaultGridBudget when zero).
	MaxTrials int
}

// Searcher suggests trials and decides early stopping for one study. It is
// immutable after New and safe for concurrent use.
type Searcher struct {
	spec   *trainingv1.StudySpec
	opts   Options
	seed   int64
	sp     *space
	metric string
	max    bool
	best   bool // BEST_MEASUREMENT
	grid   [][]float64
	nInit  int
	shift  []float64
}

// New compiles spec; an invalid spec is an *errs.InvalidError (gRPC
// InvalidArgument) naming every offending field, e.g.
// "study_spec.parameters[1].double_value_spec.min_value".
func New(spec *trainingv1.StudySpec, opts Options) (*Searcher, error) {
	var v errs.Validator
	if spec == nil {
		v.Add("study_spec", "is required")
		return nil, v.Err()
	}
	if len(spec.GetParameters()) == 0 {
		v.Add("study_spec.parameters", "at least one is required")
	}
	if len(spec.GetMetrics()) == 0 {
		v.Add("study_spec.metrics", "one is required")
	}
	for i, m := range spec.GetMetrics() {
		v.Check(m.GetMetricId() != "", fmt.Sprintf("study_spec.metrics[%d].metric_id", i), "is required")
	}
	switch spec.GetAlgorithm() {
	case trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, trainingv1.StudySpec_GRID_SEARCH, trainingv1.StudySpec_RANDOM_SEARCH:
	default:
		v.Add("study_spec.algorithm", "unknown algorithm %d", spec.GetAlgorithm())
	}
	if a := spec.GetAshaStoppingSpec(); a != nil {
		v.Check(a.GetMinStepCount() >= 0, "study_spec.asha_stopping_spec.min_step_count", "must be ≥ 0 (0 means 1)")
		v.Check(a.GetMaxStepCount() >= 0, "study_spec.asha_stopping_spec.max_step_count", "must be ≥ 0 (0 means no limit)")
		v.Check(a.GetMaxStepCount() == 0 || a.GetMaxStepCount() >= max(1, a.GetMinStepCount()),
			"study_spec.asha_stopping_spec.max_step_count", "must be ≥ min_step_count")
		v.Check(a.GetReductionFactor() == 0 || a.GetReductionFactor() >= 2,
			"study_spec.asha_stopping_spec.reduction_factor", "must be ≥ 2 (0 means %d)", defaultReductionFactor)
	}
	if opts.MaxTrials < 0 {
		v.Add("max_trial_count", "must be ≥ 0")
	}
	sp := compileSpace(spec.GetParameters(), &v)
	if err := v.Err(); err != nil {
		return nil, err
	}
	s := &Searcher{
		spec:   spec,
		opts:   opts,
		seed:   opts.Seed,
		sp:     sp,
		metric: spec.GetMetrics()[0].GetMetricId(),
		max:    spec.GetMetrics()[0].GetGoal() == trainingv1.StudySpec_MetricSpec_MAXIMIZE,
		best:   spec.GetMeasurementSelectionType() == trainingv1.StudySpec_BEST_MEASUREMENT,
		nInit:  max(len(sp.params)+1, 5),
	}
	if s.seed == 0 {
		s.seed = spec.GetSeed()
	}
	if spec.GetAlgorithm() == trainingv1.StudySpec_GRID_SEARCH {
		budget := opts.MaxTrials
		if budget == 0 {
			budget = DefaultGridBudget
		}
		s.grid = sp.grid(budget)
	}
	rng := s.rng("halton", 0)
	s.shift = make([]float64, len(sp.params))
	for i := range s.shift {
		s.shift[i] = rng.Float64()
	}
	return s, nil
}

// InitialTrials is how many trials Bayesian optimisation places
// quasi-randomly (a shifted Halton sequence) before it fits a model:
// max(d+1, 5) for d parameters, conditional ones included.
func (s *Searcher) InitialTrials() int { return s.nInit }

// GridSize is the number of points of a GRID_SEARCH study's grid (0 for
// other algorithms): Suggest returns no more after that many trials.
func (s *Searcher) GridSize() int { return len(s.grid) }

// Suggest returns the parameters of the next n trials (ids len(trials)+1
// ..), given every trial so far in id order, whatever their state: REQUESTED,
// ACTIVE and STOPPING trials count as pending points, so that a batch does
// not land on one point. It returns fewer than n when the space is
// exhausted (a grid). It is deterministic in (spec, seed, trials, n), and a
// batch equals one-at-a-time suggestions: Suggest(trials, n)[k] is
// Suggest(trials + the first k suggestions as REQUESTED trials, 1)[0].
func (s *Searcher) Suggest(trials []*trainingv1.Trial, n int) ([][]*trainingv1.Trial_Parameter, error) {
	out := make([][]*trainingv1.Trial_Parameter, 0, max(n, 0))
	if n <= 0 {
		return out, nil
	}
	var (
		pending  [][]float64
		observed = getObs(len(trials))
		feasible int
	)
	bo := s.spec.GetAlgorithm() == trainingv1.StudySpec_ALGORITHM_UNSPECIFIED
	P := len(s.sp.params)
	// Only the model reads the trials: grid and random points depend on the
	// trial id alone.
	readTrials := trials
	if !bo {
		readTrials = nil
	}
	// The points live in one pooled slab for the call: nothing that
	// outlives Suggest refers to them.
	slab := getFloats(len(readTrials) * P)
	defer putFloats(slab)
	defer putObs(observed)
	for i, t := range readTrials {
		x, ok := s.sp.decodeInto(t.GetParameters(), slab[i*P:(i+1)*P:(i+1)*P])
		if !ok {
			continue
		}
		switch t.GetState() {
		case trainingv1.Trial_REQUESTED, trainingv1.Trial_ACTIVE, trainingv1.Trial_STOPPING:
			pending = append(pending, x)
		case trainingv1.Trial_SUCCEEDED:
			if v, ok := s.Objective(t); ok {
				if t.GetEarlyStopped() {
					// Its last value is the objective after fewer steps, not
					// a result: the model describes complete training only.
					// Like a pending trial it holds its place (the search
					// does not return there) without claiming a value.
					pending = append(pending, x)
					continue
				}
				if s.max {
					v = -v
				}
				observed = append(observed, obs{x: x, z: v})
				feasible++
			}
		case trainingv1.Trial_INFEASIBLE:
			observed = append(observed, obs{x: x, z: math.NaN()})
		}
	}
	var m *model
	if bo && feasible >= s.nInit {
		// The fit depends on the observed trials only, never on pending ones,
		// so a batch and one-at-a-time suggestions see the same model.
		m = newModel(s.sp, observed, s.rng("fit", len(observed)))
		if m != nil {
			for _, x := range pending {
				m.pend(x)
			}
		}
	}
	for i := range n {
		id := len(trials) + i + 1
		var x []float64
		switch s.spec.GetAlgorithm() {
		case trainingv1.StudySpec_GRID_SEARCH:
			if id > len(s.grid) {
				return out, nil
			}
			x = s.grid[id-1]
		case trainingv1.StudySpec_RANDOM_SEARCH:
			x = s.sp.random(s.rng("random", id))
		default:
			if m == nil {
				x = s.quasiRandom(id)
			} else {
				x = m.next(s.rng("suggest", id), eiMargin(id))
			}
		}
		ps := s.sp.encode(x)
		out = append(out, ps)
		if m != nil && i < n-1 {
			// Pend the point as a later call reads it back from the stored
			// trial, so that a batch equals one-at-a-time suggestions bit
			// for bit.
			if y, ok := s.sp.decode(ps); ok {
				m.pend(y)
			}
		}
	}
	return out, nil
}

// quasiRandom is trial id's point of the shifted Halton design.
func (s *Searcher) quasiRandom(id int) []float64 {
	u := halton(id, s.shift, s.rng("halton", id))
	x := make([]float64, len(s.sp.params))
	s.sp.fill(x, func(i int) float64 { return s.sp.params[i].fromUniform(u[i]) })
	return x
}

// rng is the random source of one purpose (and trial id, or count of
// observations): a function of the seed alone, never of call order.
func (s *Searcher) rng(purpose string, id int) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", s.seed, purpose, id)
	return rand.New(rand.NewPCG(h.Sum64(), uint64(id)))
}

// value is the first metric's finite value in m.
func (s *Searcher) value(m *trainingv1.Measurement) (float64, bool) {
	for _, mm := range m.GetMetrics() {
		if mm.GetMetricId() == s.metric {
			v := mm.GetValue()
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, false
			}
			return v, true
		}
	}
	return 0, false
}

// Objective returns trial t's objective value for the study's first metric
// and whether it has one. With LAST_MEASUREMENT (the default) that is its
// final measurement's value, or without one its last intermediate
// measurement's; with BEST_MEASUREMENT the best of its final and
// intermediate measurements. Non-finite values count as missing.
func (s *Searcher) Objective(t *trainingv1.Trial) (float64, bool) {
	fv, fok := s.value(t.GetFinalMeasurement())
	ms := t.GetMeasurements()
	if s.best {
		bv, bok := fv, fok
		for _, m := range ms {
			if v, ok := s.value(m); ok && (!bok || s.Better(v, bv)) {
				bv, bok = v, true
			}
		}
		return bv, bok
	}
	if fok {
		return fv, true
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if v, ok := s.value(ms[i]); ok {
			return v, true
		}
	}
	return 0, false
}

// Better reports whether objective a is strictly better than b under the
// first metric's goal (MAXIMIZE, else minimise).
func (s *Searcher) Better(a, b float64) bool {
	if s.max {
		return a > b
	}
	return a < b
}

// Best returns the index in trials of the best SUCCEEDED trial with an
// objective (the first of equals), or -1.
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
