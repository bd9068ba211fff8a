package hpo_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/hpo"
	"github.com/loom-ml/loom/libs/hpo/testfuncs"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

type (
	spec  = trainingv1.StudySpec
	pspec = trainingv1.StudySpec_ParameterSpec
)

func dbl(id string, lo, hi float64, sc trainingv1.StudySpec_ParameterSpec_ScaleType) *pspec {
	return &pspec{ParameterId: id, ScaleType: sc, ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{
		DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: lo, MaxValue: hi}}}
}

func intp(id string, lo, hi int64) *pspec {
	return &pspec{ParameterId: id, ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec_{
		IntegerValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec{MinValue: lo, MaxValue: hi}}}
}

func catp(id string, vals ...string) *pspec {
	return &pspec{ParameterId: id, ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec_{
		CategoricalValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec{Values: vals}}}
}

func discp(id string, vals ...float64) *pspec {
	return &pspec{ParameterId: id, ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec_{
		DiscreteValueSpec: &trainingv1.StudySpec_ParameterSpec_DiscreteValueSpec{Values: vals}}}
}

// under makes child conditional on parent's categorical values.
func under(parent *pspec, child *pspec, vals ...string) *pspec {
	parent.ConditionalParameterSpecs = append(parent.ConditionalParameterSpecs, &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec{
		ParameterSpec: child,
		ParentValueCondition: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentCategoricalValues{
			ParentCategoricalValues: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_CategoricalValueCondition{Values: vals}},
	})
	return parent
}

func minimize(params ...*pspec) *spec {
	return &spec{
		Metrics:    []*trainingv1.StudySpec_MetricSpec{{MetricId: "loss", Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
		Parameters: params,
	}
}

const lin = trainingv1.StudySpec_ParameterSpec_UNIT_LINEAR_SCALE

// mixedSpec has every kind of parameter and a conditional branch.
func mixedSpec(alg trainingv1.StudySpec_Algorithm) *spec {
	opt := catp("optimizer", "sgd", "adam")
	under(opt, dbl("momentum", 0, 0.99, lin), "sgd")
	under(opt, dbl("beta2", 0.9, 0.9999, trainingv1.StudySpec_ParameterSpec_UNIT_REVERSE_LOG_SCALE), "adam")
	s := minimize(
		dbl("learning_rate", 1e-5, 1e-1, trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE),
		intp("batch_size", 8, 256),
		discp("weight_decay", 0, 1e-4, 1e-3, 1e-2),
		opt,
	)
	s.Algorithm = alg
	return s
}

// mixedLoss is a smooth loss over mixedSpec's parameters.
func mixedLoss(t testing.TB, ps []*trainingv1.Trial_Parameter) float64 {
	t.Helper()
	v := map[string]*structpb.Value{}
	for _, p := range ps {
		v[p.GetParameterId()] = p.GetValue()
	}
	lr := math.Log10(v["learning_rate"].GetNumberValue())
	loss := (lr+2.5)*(lr+2.5) + math.Abs(math.Log2(v["batch_size"].GetNumberValue())-5)/4 + 100*v["weight_decay"].GetNumberValue()
	switch v["optimizer"].GetStringValue() {
	case "sgd":
		loss += 1 - v["momentum"].GetNumberValue()
	case "adam":
		loss += 10 * (1 - v["beta2"].GetNumberValue())
	default:
		t.Fatalf("optimizer %v", v["optimizer"])
	}
	return loss
}

func trial(id int, st trainingv1.Trial_State, ps []*trainingv1.Trial_Parameter, loss float64) *trainingv1.Trial {
	t := &trainingv1.Trial{Id: fmt.Sprint(id), State: st, Parameters: ps}
	if st == trainingv1.Trial_SUCCEEDED {
		t.FinalMeasurement = &trainingv1.Measurement{Metrics: []*trainingv1.Measurement_Metric{{MetricId: "loss", Value: loss}}}
	}
	return t
}

func mustNew(t testing.TB, s *spec, o hpo.Options) *hpo.Searcher {
	t.Helper()
	h, err := hpo.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestNewNamesTheField(t *testing.T) {
	t.Parallel()
	deep := catp("d0", "a", "b")
	cur := deep
	for i := 1; i <= 5; i++ {
		c := catp(fmt.Sprintf("d%d", i), "a", "b")
		under(cur, c, "a")
		cur = c
	}
	badCond := intp("layers", 1, 4)
	under(badCond, dbl("x", 0, 1, lin), "a")
	intCond := intp("layers", 1, 4)
	intCond.ConditionalParameterSpecs = append(intCond.ConditionalParameterSpecs, &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec{
		ParameterSpec: dbl("x", 0, 1, lin),
		ParentValueCondition: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_ParentIntValues{
			ParentIntValues: &trainingv1.StudySpec_ParameterSpec_ConditionalParameterSpec_IntValueCondition{Values: []int64{9}}},
	})
	asha := minimize(dbl("x", 0, 1, lin))
	asha.AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{ReductionFactor: 1}}
	noMetric := minimize(dbl("x", 0, 1, lin))
	noMetric.Metrics = nil
	for _, tc := range []struct {
		name  string
		spec  *spec
		field string
	}{
		{"nil", nil, "study_spec"},
		{"no parameters", minimize(), "study_spec.parameters"},
		{"no metric", noMetric, "study_spec.metrics"},
		{"min above max", minimize(dbl("x", 0, 1, lin), dbl("y", 2, 1, lin)), "study_spec.parameters[1].double_value_spec.min_value"},
		{"log of zero", minimize(dbl("x", 0, 1, trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE)), "study_spec.parameters[0].double_value_spec.min_value"},
		{"infinite", minimize(dbl("x", 0, math.Inf(1), lin)), "study_spec.parameters[0].double_value_spec"},
		// Its width overflows: every suggestion would be a bound.
		{"too wide", minimize(dbl("x", -1e308, 1e308, lin)), "study_spec.parameters[0].double_value_spec"},
		{"duplicate id", minimize(dbl("x", 0, 1, lin), intp("x", 0, 1)), "study_spec.parameters[1].parameter_id"},
		{"flag-unsafe id", minimize(dbl("x y", 0, 1, lin)), "study_spec.parameters[0].parameter_id"},
		{"no value spec", minimize(&pspec{ParameterId: "x"}), "study_spec.parameters[0]"},
		{"empty categorical", minimize(catp("c")), "study_spec.parameters[0].categorical_value_spec.values"},
		{"repeated categorical", minimize(catp("c", "a", "a")), "study_spec.parameters[0].categorical_value_spec.values[1]"},
		{"repeated discrete", minimize(discp("d", 1, 2, 1)), "study_spec.parameters[0].discrete_value_spec.values[2]"},
		{"condition type", minimize(badCond), "study_spec.parameters[0].conditional_parameter_specs[0].parent_categorical_values"},
		{"condition value", minimize(intCond), "study_spec.parameters[0].conditional_parameter_specs[0].parent_int_values.values[0]"},
		{"unknown parent value", minimize(under(catp("c", "a"), dbl("x", 0, 1, lin), "z")), "study_spec.parameters[0].conditional_parameter_specs[0].parent_categorical_values.values[0]"},
		{"too deep", minimize(deep), "study_spec.parameters[0].conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs[0].parameter_spec.conditional_parameter_specs[0]"},
		{"asha factor", asha, "study_spec.asha_stopping_spec.reduction_factor"},
	} {
		_, err := hpo.New(tc.spec, hpo.Options{Seed: 1})
		var inv *errs.InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%s: New = %v, want an InvalidError", tc.name, err)
			continue
		}
		var fields []string
		for _, v := range inv.Violations {
			fields = append(fields, v.Field)
		}
		if !slices.Contains(fields, tc.field) {
			t.Errorf("%s: violations %q, want one of field %s", tc.name, err, tc.field)
		}
	}
	// Depth 4 exactly is allowed.
	ok := catp("e0", "a", "b")
	cur = ok
	for i := 1; i <= 4; i++ {
		c := catp(fmt.Sprintf("e%d", i), "a", "b")
		under(cur, c, "a")
		cur = c
	}
	if _, err := hpo.New(minimize(ok), hpo.Options{}); err != nil {
		t.Errorf("depth 4: %v", err)
	}
}

// checkPoint asserts ps is a legal point of mixedSpec.
func checkPoint(t *testing.T, ps []*trainingv1.Trial_Parameter) {
	t.Helper()
	v := map[string]*structpb.Value{}
	for _, p := range ps {
		if _, dup := v[p.GetParameterId()]; dup {
			t.Fatalf("parameter %s twice", p.GetParameterId())
		}
		v[p.GetParameterId()] = p.GetValue()
	}
	if lr := v["learning_rate"].GetNumberValue(); lr < 1e-5 || lr > 1e-1 {
		t.Fatalf("learning_rate %v", lr)
	}
	if b := v["batch_size"].GetNumberValue(); b < 8 || b > 256 || b != math.Trunc(b) {
		t.Fatalf("batch_size %v", b)
	}
	if w := v["weight_decay"].GetNumberValue(); !slices.Contains([]float64{0, 1e-4, 1e-3, 1e-2}, w) {
		t.Fatalf("weight_decay %v", w)
	}
	switch v["optimizer"].GetStringValue() {
	case "sgd":
		if m, ok := v["momentum"]; !ok || m.GetNumberValue() < 0 || m.GetNumberValue() > 0.99 {
			t.Fatalf("sgd with momentum %v", m)
		}
		if _, ok := v["beta2"]; ok || len(ps) != 5 {
			t.Fatalf("sgd point %v", ps)
		}
	case "adam":
		if b, ok := v["beta2"]; !ok || b.GetNumberValue() < 0.9 || b.GetNumberValue() > 0.9999 {
			t.Fatalf("adam with beta2 %v", b)
		}
		if _, ok := v["momentum"]; ok || len(ps) != 5 {
			t.Fatalf("adam point %v", ps)
		}
	default:
		t.Fatalf("optimizer %v", v["optimizer"])
	}
}

// runStudy runs a study of mixedSpec for n trials, batch at a time, and
// returns its trials.
func runStudy(t *testing.T, s *hpo.Searcher, n, batch int) []*trainingv1.Trial {
	t.Helper()
	var trials []*trainingv1.Trial
	for len(trials) < n {
		sug, err := s.Suggest(trials, batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(sug) == 0 {
			break
		}
		for _, ps := range sug {
			checkPoint(t, ps)
			trials = append(trials, trial(len(trials)+1, trainingv1.Trial_SUCCEEDED, ps, mixedLoss(t, ps)))
		}
	}
	return trials
}

func TestEveryAlgorithmSuggestsLegalPoints(t *testing.T) {
	t.Parallel()
	for _, alg := range []trainingv1.StudySpec_Algorithm{trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, trainingv1.StudySpec_RANDOM_SEARCH, trainingv1.StudySpec_GRID_SEARCH} {
		s := mustNew(t, mixedSpec(alg), hpo.Options{Seed: 7, MaxTrials: 30})
		trials := runStudy(t, s, 30, 3)
		if want := min(30, s.GridSize()); alg == trainingv1.StudySpec_GRID_SEARCH && (want < 20 || len(trials) != want) || alg != trainingv1.StudySpec_GRID_SEARCH && len(trials) != 30 {
			t.Errorf("%v: %d trials (grid of %d), want 30 (a grid: all of its 20..30 points)", alg, len(trials), s.GridSize())
		}
		seen := map[string]bool{}
		for _, tr := range trials {
			seen[tr.GetParameters()[3].GetValue().GetStringValue()] = true
		}
		if !seen["sgd"] || !seen["adam"] {
			t.Errorf("%v: optimizers tried %v, want both", alg, seen)
		}
	}
}

func TestScales(t *testing.T) {
	t.Parallel()
	s := mustNew(t, minimize(
		dbl("log", 1e-6, 1, trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE),
		dbl("rlog", 0, 1, trainingv1.StudySpec_ParameterSpec_UNIT_LINEAR_SCALE),
		dbl("rev", 1e-3, 1, trainingv1.StudySpec_ParameterSpec_UNIT_REVERSE_LOG_SCALE),
	), hpo.Options{Seed: 3})
	s.Suggest(nil, 1)
	spec := minimize(
		dbl("log", 1e-6, 1, trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE),
		dbl("rev", 1e-3, 1, trainingv1.StudySpec_ParameterSpec_UNIT_REVERSE_LOG_SCALE),
	)
	spec.Algorithm = trainingv1.StudySpec_RANDOM_SEARCH
	s = mustNew(t, spec, hpo.Options{Seed: 3})
	sug, err := s.Suggest(nil, 2000)
	if err != nil {
		t.Fatal(err)
	}
	var logs, revs []float64
	for _, ps := range sug {
		logs = append(logs, ps[0].GetValue().GetNumberValue())
		revs = append(revs, ps[1].GetValue().GetNumberValue())
	}
	slices.Sort(logs)
	slices.Sort(revs)
	// Log scale: the median is near the geometric mean 1e-3.
	if m := logs[len(logs)/2]; m < 3e-4 || m > 3e-3 {
		t.Errorf("log scale median %v, want about 1e-3", m)
	}
	// Reverse log: values crowd the top; 1-x is log-uniform on [0, 0.999]
	// shifted, so the median of 1.001-x is near sqrt(1e-3·1) ≈ 0.0316.
	if m := 1.001 - revs[len(revs)/2]; m < 0.01 || m > 0.1 {
		t.Errorf("reverse log scale: median distance from the top %v, want about 0.03", m)
	}
	if revs[0] < 1e-3 || revs[len(revs)-1] > 1 || logs[0] < 1e-6 || logs[len(logs)-1] > 1 {
		t.Errorf("out of range: log [%v, %v], rev [%v, %v]", logs[0], logs[len(logs)-1], revs[0], revs[len(revs)-1])
	}
}

func suggestionsEqual(a, b [][]*trainingv1.Trial_Parameter) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if !proto.Equal(a[i][j], b[i][j]) {
				return false
			}
		}
	}
	return true
}

// history is a study's trials in every state: completed, infeasible,
// one that succeeded without the metric, and pending ones.
func history(t *testing.T, s *hpo.Searcher, n int) []*trainingv1.Trial {
	trials := runStudy(t, s, n, 2)
	trials[2].State = trainingv1.Trial_INFEASIBLE
	trials[2].FinalMeasurement = nil
	trials[4].FinalMeasurement = nil // succeeded without the metric: ignored
	trials[n-1].State = trainingv1.Trial_ACTIVE
	trials[n-1].FinalMeasurement = nil
	trials[n-2].State = trainingv1.Trial_REQUESTED
	trials[n-2].FinalMeasurement = nil
	return trials
}

func TestDeterministicAndReplayable(t *testing.T) {
	t.Parallel()
	for _, alg := range []trainingv1.StudySpec_Algorithm{trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, trainingv1.StudySpec_RANDOM_SEARCH, trainingv1.StudySpec_GRID_SEARCH} {
		s := mustNew(t, mixedSpec(alg), hpo.Options{Seed: 11, MaxTrials: 60})
		trials := history(t, s, 24)
		batch, err := s.Suggest(trials, 4)
		if err != nil || len(batch) != 4 {
			t.Fatalf("%v: Suggest = %d, %v", alg, len(batch), err)
		}
		// A restarted service: a new Searcher, the stored trials.
		s2 := mustNew(t, mixedSpec(alg), hpo.Options{Seed: 11, MaxTrials: 60})
		again, _ := s2.Suggest(trials, 4)
		if !suggestionsEqual(batch, again) {
			t.Errorf("%v: a new Searcher on the same trials suggests differently", alg)
		}
		// One at a time, each earlier suggestion stored as a REQUESTED trial
		// (round-tripped through the wire format as the service stores it).
		var step [][]*trainingv1.Trial_Parameter
		cur := slices.Clone(trials)
		for k := range 4 {
			one, err := s2.Suggest(cur, 1)
			if err != nil || len(one) != 1 {
				t.Fatalf("%v: stepwise Suggest = %v, %v", alg, one, err)
			}
			step = append(step, one[0])
			stored := trial(len(cur)+1, trainingv1.Trial_REQUESTED, one[0], 0)
			wire, _ := proto.Marshal(stored)
			back := &trainingv1.Trial{}
			if err := proto.Unmarshal(wire, back); err != nil {
				t.Fatal(err)
			}
			cur = append(cur, back)
			_ = k
		}
		if !suggestionsEqual(batch, step) {
			t.Errorf("%v: Suggest(trials, 4) differs from four stepwise suggestions:\n%v\n%v", alg, batch, step)
		}
		// A different seed gives a different search.
		s3 := mustNew(t, mixedSpec(alg), hpo.Options{Seed: 12, MaxTrials: 60})
		other, _ := s3.Suggest(trials, 4)
		if alg != trainingv1.StudySpec_GRID_SEARCH && suggestionsEqual(batch, other) {
			t.Errorf("%v: seeds 11 and 12 suggest the same", alg)
		}
	}
}

func TestSeedFromSpec(t *testing.T) {
	t.Parallel()
	sp := testfuncs.Branin().Spec(trainingv1.StudySpec_RANDOM_SEARCH, 5)
	a, _ := mustNew(t, sp, hpo.Options{}).Suggest(nil, 3)
	b, _ := mustNew(t, sp, hpo.Options{Seed: 5}).Suggest(nil, 3)
	c, _ := mustNew(t, sp, hpo.Options{Seed: 6}).Suggest(nil, 3)
	if !suggestionsEqual(a, b) || suggestionsEqual(a, c) {
		t.Error("Options.Seed 0 should take study_spec.seed")
	}
}

func dist(f testfuncs.Func, a, b []*trainingv1.Trial_Parameter) float64 {
	x, _ := f.Point(a)
	y, _ := f.Point(b)
	s := 0.0
	for i := range x {
		d := (x[i] - y[i]) / (f.Upper[i] - f.Lower[i])
		s += d * d
	}
	return math.Sqrt(s)
}

func TestBatchDoesNotLandOnOnePoint(t *testing.T) {
	t.Parallel()
	f := testfuncs.Branin()
	s := mustNew(t, f.Spec(trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, 2), hpo.Options{Seed: 2})
	var trials []*trainingv1.Trial
	for len(trials) < 12 {
		sug, _ := s.Suggest(trials, 1)
		x, _ := f.Point(sug[0])
		trials = append(trials, testfuncs.Trial(len(trials)+1, sug[0], f.F(x)))
	}
	// Pending trials count: two ACTIVE trials at the model's favourite point.
	fav, _ := s.Suggest(trials, 1)
	trials = append(trials, &trainingv1.Trial{Id: "13", State: trainingv1.Trial_ACTIVE, Parameters: fav[0]})
	batch, err := s.Suggest(trials, 8)
	if err != nil || len(batch) != 8 {
		t.Fatalf("Suggest = %d, %v", len(batch), err)
	}
	for i := range batch {
		if d := dist(f, batch[i], fav[0]); d < 1e-3 {
			t.Errorf("suggestion %d lands on the pending trial (distance %v)", i, d)
		}
		for j := range i {
			if d := dist(f, batch[i], batch[j]); d < 1e-3 {
				t.Errorf("suggestions %d and %d coincide (distance %v)", j, i, d)
			}
		}
	}
}

func TestGrid(t *testing.T) {
	t.Parallel()
	sp := minimize(catp("opt", "a", "b", "c"), dbl("lr", 1e-4, 1e-1, trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE), intp("layers", 1, 2))
	sp.Algorithm = trainingv1.StudySpec_GRID_SEARCH
	s := mustNew(t, sp, hpo.Options{Seed: 1, MaxTrials: 20})
	if s.GridSize() == 0 || s.GridSize() > 20 {
		t.Fatalf("grid of %d points for a budget of 20", s.GridSize())
	}
	all, err := s.Suggest(nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != s.GridSize() {
		t.Fatalf("Suggest returned %d, want the whole grid of %d", len(all), s.GridSize())
	}
	seen := map[string]bool{}
	lrs := map[float64]bool{}
	for _, ps := range all {
		k := fmt.Sprint(ps[0].GetValue().GetStringValue(), ps[1].GetValue().GetNumberValue(), ps[2].GetValue().GetNumberValue())
		if seen[k] {
			t.Errorf("grid point %s twice", k)
		}
		seen[k] = true
		lrs[ps[1].GetValue().GetNumberValue()] = true
	}
	// 3 optimizers × 2 layer counts × as many learning rates as fit: 3.
	if len(all) != 18 || len(lrs) != 3 || !lrs[1e-4] || !lrs[1e-1] || !lrs[math.Round(1e-4*math.Pow(1000, 0.5)*1e12)/1e12] && !approxIn(lrs, math.Sqrt(1e-5)) {
		t.Errorf("grid: %d points, learning rates %v; want 18 with 1e-4, ~3.16e-3, 1e-1", len(all), lrs)
	}
	// Exhausted: nothing more after the grid, fewer than asked near its end.
	var trials []*trainingv1.Trial
	for i, ps := range all[:16] {
		trials = append(trials, trial(i+1, trainingv1.Trial_SUCCEEDED, ps, 1))
	}
	rest, _ := s.Suggest(trials, 5)
	if len(rest) != 2 || !suggestionsEqual(rest, all[16:]) {
		t.Errorf("after 16 trials, Suggest(5) = %d points, want the last 2 of the grid", len(rest))
	}
	for i, ps := range all[16:] {
		trials = append(trials, trial(17+i, trainingv1.Trial_SUCCEEDED, ps, 1))
	}
	if none, _ := s.Suggest(trials, 1); len(none) != 0 {
		t.Errorf("exhausted grid suggested %v", none)
	}
	// A discrete space smaller than the budget is enumerated in full.
	small := minimize(discp("d", 1, 2, 4), catp("c", "x", "y"))
	small.Algorithm = trainingv1.StudySpec_GRID_SEARCH
	if n := mustNew(t, small, hpo.Options{MaxTrials: 100}).GridSize(); n != 6 {
		t.Errorf("grid of 3×2 values has %d points, want 6", n)
	}
	// Conditional parameters vary only under their parent's value.
	cond := minimize(under(catp("opt", "sgd", "adam"), discp("momentum", 0.5, 0.9), "sgd"))
	cond.Algorithm = trainingv1.StudySpec_GRID_SEARCH
	pts, _ := mustNew(t, cond, hpo.Options{MaxTrials: 10}).Suggest(nil, 10)
	if len(pts) != 3 {
		t.Errorf("conditional grid %v, want sgd×2 + adam", pts)
	}
	// A child the grid never reaches (a budget of one point takes the
	// parent's middle value, which does not select it) is not grown: an
	// integer child of range 2^40 once kept the training service busy for
	// hours on this spec of a few dozen bytes.
	unreached := minimize(under(catp("opt", "a", "b", "c"), intp("lr", 0, 1<<40), "a"))
	unreached.Algorithm = trainingv1.StudySpec_GRID_SEARCH
	if g := mustNew(t, unreached, hpo.Options{Seed: 1, MaxTrials: 1}); g.GridSize() != 1 {
		t.Errorf("a one-point grid over an unreached child has %d points", g.GridSize())
	}
	// Reached, a child grows no further than the budget.
	wide := minimize(intp("n", 0, 1<<40))
	wide.Algorithm = trainingv1.StudySpec_GRID_SEARCH
	if g := mustNew(t, wide, hpo.Options{MaxTrials: 1000}); g.GridSize() != 1000 {
		t.Errorf("a grid over an integer of range 2^40 with a budget of 1000 has %d points", g.GridSize())
	}
}

func approxIn(m map[float64]bool, v float64) bool {
	for k := range m {
		if math.Abs(k-v) < 1e-9*v {
			return true
		}
	}
	return false
}

func measured(v float64) *trainingv1.Measurement {
	return &trainingv1.Measurement{Metrics: []*trainingv1.Measurement_Metric{{MetricId: "loss", Value: v}}}
}

func TestObjectiveAndBest(t *testing.T) {
	t.Parallel()
	sp := minimize(dbl("x", 0, 1, lin))
	s := mustNew(t, sp, hpo.Options{})
	tr := &trainingv1.Trial{State: trainingv1.Trial_SUCCEEDED, Measurements: []*trainingv1.Measurement{measured(3), measured(1), measured(2)}}
	if v, ok := s.Objective(tr); !ok || v != 2 {
		t.Errorf("LAST without final: %v %v, want the last measurement 2", v, ok)
	}
	tr.FinalMeasurement = measured(5)
	if v, _ := s.Objective(tr); v != 5 {
		t.Errorf("LAST with final: %v, want 5", v)
	}
	sp.MeasurementSelectionType = trainingv1.StudySpec_BEST_MEASUREMENT
	if v, _ := mustNew(t, sp, hpo.Options{}).Objective(tr); v != 1 {
		t.Errorf("BEST, minimising: %v, want 1", v)
	}
	sp.Metrics[0].Goal = trainingv1.StudySpec_MetricSpec_MAXIMIZE
	sm := mustNew(t, sp, hpo.Options{})
	if v, _ := sm.Objective(tr); v != 5 {
		t.Errorf("BEST, maximising: %v, want 5", v)
	}
	if _, ok := s.Objective(&trainingv1.Trial{FinalMeasurement: &trainingv1.Measurement{Metrics: []*trainingv1.Measurement_Metric{{MetricId: "other", Value: 1}}}}); ok {
		t.Error("a trial without the metric has an objective")
	}
	if _, ok := s.Objective(&trainingv1.Trial{FinalMeasurement: measured(math.NaN())}); ok {
		t.Error("NaN counts as an objective")
	}
	trials := []*trainingv1.Trial{
		{State: trainingv1.Trial_SUCCEEDED, FinalMeasurement: measured(2)},
		{State: trainingv1.Trial_ACTIVE, Measurements: []*trainingv1.Measurement{measured(0)}},
		{State: trainingv1.Trial_SUCCEEDED, FinalMeasurement: measured(1)},
		{State: trainingv1.Trial_INFEASIBLE, FinalMeasurement: measured(-5)},
		{State: trainingv1.Trial_SUCCEEDED, FinalMeasurement: measured(3)},
	}
	if b := s.Best(trials); b != 2 {
		t.Errorf("Best minimising = %d, want 2", b)
	}
	if b := sm.Best(trials); b != 4 {
		t.Errorf("Best maximising = %d, want 4", b)
	}
	if b := s.Best(trials[1:2]); b != -1 {
		t.Errorf("Best without a completed trial = %d, want -1", b)
	}
}

func TestInfeasibleAndMaximize(t *testing.T) {
	t.Parallel()
	// Maximise -branin; the left third of the box is infeasible.
	f := testfuncs.Branin()
	sp := f.Spec(trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, 4)
	sp.Metrics[0].Goal = trainingv1.StudySpec_MetricSpec_MAXIMIZE
	s := mustNew(t, sp, hpo.Options{Seed: 4})
	var trials []*trainingv1.Trial
	for len(trials) < 40 {
		sug, err := s.Suggest(trials, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, ps := range sug {
			x, _ := f.Point(ps)
			tr := testfuncs.Trial(len(trials)+1, ps, -f.F(x))
			if x[0] < 0 {
				tr.State, tr.FinalMeasurement = trainingv1.Trial_INFEASIBLE, nil
			}
			trials = append(trials, tr)
		}
	}
	b := s.Best(trials)
	v, _ := s.Objective(trials[b])
	// Feasible optima: 0.398 at (π, 2.275) and (9.425, 2.475).
	if -v > 0.5 {
		t.Errorf("best feasible -branin %v after 40 trials, want ≥ -0.5", v)
	}
	infeasible := 0
	for _, tr := range trials[20:] {
		if tr.GetState() == trainingv1.Trial_INFEASIBLE {
			infeasible++
		}
	}
	if infeasible > 8 {
		t.Errorf("%d of the last 20 trials infeasible: the search does not learn to avoid them", infeasible)
	}
	// All infeasible: still suggests (quasi-random), no error.
	var bad []*trainingv1.Trial
	for i := range 10 {
		sug, _ := s.Suggest(bad, 1)
		bad = append(bad, &trainingv1.Trial{Id: fmt.Sprint(i + 1), State: trainingv1.Trial_INFEASIBLE, Parameters: sug[0]})
	}
	if sug, err := s.Suggest(bad, 3); err != nil || len(sug) != 3 {
		t.Errorf("all infeasible: Suggest = %v, %v", sug, err)
	}
}

func TestForeignTrialsAreIgnored(t *testing.T) {
	t.Parallel()
	s := mustNew(t, mixedSpec(trainingv1.StudySpec_ALGORITHM_UNSPECIFIED), hpo.Options{Seed: 1})
	trials := runStudy(t, s, 10, 1)
	// A trial whose parameters are outside the space (a spec edited by
	// hand, a value the service could not store) must not break the search.
	trials = append(trials, trial(11, trainingv1.Trial_SUCCEEDED, []*trainingv1.Trial_Parameter{
		{ParameterId: "learning_rate", Value: structpb.NewStringValue("fast")},
	}, 0))
	if sug, err := s.Suggest(trials, 2); err != nil || len(sug) != 2 {
		t.Fatalf("Suggest = %v, %v", sug, err)
	}
}

func TestSuggestZero(t *testing.T) {
	t.Parallel()
	s := mustNew(t, testfuncs.Branin().Spec(0, 1), hpo.Options{})
	if sug, err := s.Suggest(nil, 0); err != nil || len(sug) != 0 {
		t.Errorf("Suggest(0) = %v, %v", sug, err)
	}
	if s.InitialTrials() != 5 {
		t.Errorf("InitialTrials = %d, want 5 for 2 parameters", s.InitialTrials())
	}
	if !strings.Contains(fmt.Sprint(hpo.MaxConditionalDepth), "4") {
		t.Error("MaxConditionalDepth")
	}
}

// TestLargestSpec: the largest spec validation allows (64 parameters, a
// categorical of 256 values, conditional ones) still suggests legal,
// distinct batches from a long history.
func TestLargestSpec(t *testing.T) {
	t.Parallel()
	var params []*pspec
	var cats []string
	for i := range 256 {
		cats = append(cats, fmt.Sprintf("v%d", i))
	}
	params = append(params, under(catp("big", cats...), dbl("only_v0", 0, 1, lin), "v0"))
	for i := 1; i < 63; i++ {
		switch i % 3 {
		case 0:
			params = append(params, dbl(fmt.Sprintf("d%d", i), 1e-3, 1, trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE))
		case 1:
			params = append(params, intp(fmt.Sprintf("i%d", i), 0, 100))
		default:
			params = append(params, discp(fmt.Sprintf("q%d", i), 1, 2, 4, 8))
		}
	}
	s := mustNew(t, minimize(params...), hpo.Options{Seed: 1})
	if s.InitialTrials() != 65 {
		t.Errorf("InitialTrials = %d, want 65", s.InitialTrials())
	}
	var trials []*trainingv1.Trial
	for len(trials) < 150 {
		sug, err := s.Suggest(trials, 16)
		if err != nil {
			t.Fatal(err)
		}
		for _, ps := range sug {
			loss := 0.0
			for _, p := range ps {
				loss += math.Abs(p.GetValue().GetNumberValue() - 1)
			}
			trials = append(trials, trial(len(trials)+1, trainingv1.Trial_SUCCEEDED, ps, loss))
		}
	}
	batch, err := s.Suggest(trials, 8)
	if err != nil || len(batch) != 8 {
		t.Fatalf("Suggest = %d, %v", len(batch), err)
	}
	seen := map[string]bool{}
	for _, ps := range batch {
		if n := len(ps); n != 63 && n != 64 {
			t.Errorf("suggestion with %d parameters, want 63 or 64 (only_v0 under big=v0)", n)
		}
		k := fmt.Sprint(ps)
		if seen[k] {
			t.Errorf("batch repeats a point")
		}
		seen[k] = true
	}
}

// TestEarlyStoppedTrialsAreNotResults: an early-stopped trial's last value
// is the objective after fewer steps, so the model ignores it. Its value
// does not change the suggestions, and it holds its place exactly as a
// pending (REQUESTED) trial at the same point would.
func TestEarlyStoppedTrialsAreNotResults(t *testing.T) {
	t.Parallel()
	f := testfuncs.Branin()
	s := mustNew(t, f.Spec(trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, 9), hpo.Options{Seed: 9})
	var trials []*trainingv1.Trial
	for len(trials) < 12 {
		sug, err := s.Suggest(trials, 1)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := f.Point(sug[0])
		trials = append(trials, testfuncs.Trial(len(trials)+1, sug[0], f.F(x)))
	}
	with := func(mod func(tr *trainingv1.Trial)) []*trainingv1.Trial {
		out := make([]*trainingv1.Trial, len(trials))
		for i, tr := range trials {
			out[i] = proto.Clone(tr).(*trainingv1.Trial)
		}
		mod(out[len(out)-1])
		return out
	}
	var got [3][][]*trainingv1.Trial_Parameter
	for k, mod := range []func(tr *trainingv1.Trial){
		func(tr *trainingv1.Trial) { tr.EarlyStopped = true; tr.FinalMeasurement.Metrics[0].Value = -1e6 },
		func(tr *trainingv1.Trial) { tr.EarlyStopped = true; tr.FinalMeasurement.Metrics[0].Value = 1e6 },
		func(tr *trainingv1.Trial) { tr.State, tr.FinalMeasurement = trainingv1.Trial_REQUESTED, nil },
	} {
		sug, err := s.Suggest(with(mod), 2)
		if err != nil {
			t.Fatal(err)
		}
		got[k] = sug
	}
	for k := 1; k < 3; k++ {
		for j := range got[0] {
			if !proto.Equal(&trainingv1.Trial{Parameters: got[0][j]}, &trainingv1.Trial{Parameters: got[k][j]}) {
				t.Errorf("variant %d, suggestion %d: %v, want %v (as with the stopped trial at -1e6)", k, j, got[k][j], got[0][j])
			}
		}
	}
	// And a completed trial's value does count: the same trial not stopped,
	// at -1e6, draws the search.
	sug, err := s.Suggest(with(func(tr *trainingv1.Trial) { tr.FinalMeasurement.Metrics[0].Value = -1e6 }), 2)
	if err != nil {
		t.Fatal(err)
	}
	if proto.Equal(&trainingv1.Trial{Parameters: sug[0]}, &trainingv1.Trial{Parameters: got[0][0]}) {
		t.Error("a completed trial's value made no difference: the test cannot tell stopped from completed")
	}
}
