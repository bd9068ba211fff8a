package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loom-ml/loom/libs/hpo"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// latencySpec is an 8-parameter space of the usual mix: doubles on linear
// and log scales, integers, a categorical.
func latencySpec(alg trainingv1.StudySpec_Algorithm, seed int64) *trainingv1.StudySpec {
	dbl := func(id string, lo, hi float64, log bool) *trainingv1.StudySpec_ParameterSpec {
		scale := trainingv1.StudySpec_ParameterSpec_UNIT_LINEAR_SCALE
		if log {
			scale = trainingv1.StudySpec_ParameterSpec_UNIT_LOG_SCALE
		}
		return &trainingv1.StudySpec_ParameterSpec{ParameterId: id, ScaleType: scale, ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec_{
			DoubleValueSpec: &trainingv1.StudySpec_ParameterSpec_DoubleValueSpec{MinValue: lo, MaxValue: hi}}}
	}
	integer := func(id string, lo, hi int64) *trainingv1.StudySpec_ParameterSpec {
		return &trainingv1.StudySpec_ParameterSpec{ParameterId: id, ScaleType: trainingv1.StudySpec_ParameterSpec_UNIT_LINEAR_SCALE, ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec_{
			IntegerValueSpec: &trainingv1.StudySpec_ParameterSpec_IntegerValueSpec{MinValue: lo, MaxValue: hi}}}
	}
	return &trainingv1.StudySpec{
		Metrics:   []*trainingv1.StudySpec_MetricSpec{{MetricId: objectiveID, Goal: trainingv1.StudySpec_MetricSpec_MINIMIZE}},
		Algorithm: alg, Seed: seed,
		Parameters: []*trainingv1.StudySpec_ParameterSpec{
			dbl("learning_rate", 1e-5, 1, true),
			dbl("weight_decay", 1e-6, 1e-1, true),
			dbl("momentum", 0, 0.99, false),
			dbl("dropout", 0, 0.8, false),
			dbl("warmup_fraction", 0, 0.3, false),
			integer("layers", 1, 12),
			integer("hidden_units", 16, 1024),
			{ParameterId: "optimizer", ParameterValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec_{
				CategoricalValueSpec: &trainingv1.StudySpec_ParameterSpec_CategoricalValueSpec{Values: []string{"sgd", "adam", "adamw"}}}},
		},
	}
}

// latencyResult is the time of Suggest calls on one synthetic history:
// CPU time (the process's, all threads, so the garbage collector's work
// counts) and wall time, with the load average around the measurement.
type latencyResult struct {
	history, params, calls int
	p50, p99, max          time.Duration // CPU time
	wallP50, wallP99       time.Duration
	wallMax                time.Duration
	load                   string // /proc/loadavg's 1-minute average before and after
}

// processCPU is the CPU time of the whole process: on a shared machine it
// measures a call's work without the time spent waiting for a CPU, and,
// unlike the thread's own clock, it includes the garbage collector's
// background workers.
func processCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// loadAvg is the 1-minute load average ("?" where /proc/loadavg is
// missing).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// syntheticHistory is n SUCCEEDED trials at points from Loom's random
// search, each scored by a smooth function of its numeric parameters
// (where they sit in their ranges), so that a model has something to fit.
func syntheticHistory(n int) ([]*trainingv1.Trial, error) {
	spec := latencySpec(trainingv1.StudySpec_RANDOM_SEARCH, 1)
	s, err := hpo.New(spec, hpo.Options{Seed: 1, MaxTrials: n})
	if err != nil {
		return nil, err
	}
	sug, err := s.Suggest(nil, n)
	if err != nil {
		return nil, err
	}
	if len(sug) != n {
		return nil, fmt.Errorf("random search gave %d of %d points", len(sug), n)
	}
	trials := make([]*trainingv1.Trial, n)
	for i, ps := range sug {
		v := 0.0
		for j, p := range ps {
			f := p.GetValue().GetNumberValue()
			if str := p.GetValue().GetStringValue(); str != "" {
				f = float64(len(str)) // the categorical: its choices differ in length
			}
			v += math.Sin(float64(j+1)*math.Log1p(math.Abs(f))) * float64(j+1)
		}
		trials[i] = trialOf(i+1, ps, v)
	}
	return trials, nil
}

// measureLatency times calls Suggest(history, 1) calls of Loom's default
// search, each with a fresh searcher (another seed), on one goroutine
// with GOMAXPROCS 1, so that nothing else of this process runs in between
// and the process CPU time is the call's (and the collector's).
func measureLatency(history, calls int) (latencyResult, error) {
	r := latencyResult{history: history, params: 8, calls: calls}
	trials, err := syntheticHistory(history)
	if err != nil {
		return r, err
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	before := loadAvg()
	cpu := make([]time.Duration, 0, calls)
	wall := make([]time.Duration, 0, calls)
	for i := range calls {
		seed := int64(i + 1)
		s, err := hpo.New(latencySpec(trainingv1.StudySpec_ALGORITHM_UNSPECIFIED, seed), hpo.Options{Seed: seed, MaxTrials: history + calls})
		if err != nil {
			return r, err
		}
		c0, t0 := processCPU(), time.Now()
		sug, err := s.Suggest(trials, 1)
		wall = append(wall, time.Since(t0))
		cpu = append(cpu, processCPU()-c0)
		if err != nil || len(sug) != 1 {
			return r, fmt.Errorf("suggest on %d trials: %d suggestions, %v", history, len(sug), err)
		}
	}
	r.load = before + " → " + loadAvg()
	slices.Sort(cpu)
	slices.Sort(wall)
	pick := func(ds []time.Duration, q float64) time.Duration { return ds[int(math.Ceil(q*float64(len(ds))))-1] }
	r.p50, r.p99, r.max = pick(cpu, 0.5), pick(cpu, 0.99), cpu[len(cpu)-1]
	r.wallP50, r.wallP99, r.wallMax = pick(wall, 0.5), pick(wall, 0.99), wall[len(wall)-1]
	return r, nil
}
