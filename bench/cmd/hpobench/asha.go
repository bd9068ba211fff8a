package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/loom-ml/loom/libs/hpo"
	"github.com/loom-ml/loom/libs/toytrain"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// ashaResult is one seed's comparison of ASHA against no early stopping on
// the trainer's learning curves, on the same configurations: the
// stopping rule's effect alone, so that "the same best result" compares
// like with like.
type ashaResult struct {
	// full: every configuration trains every epoch.
	fullEpochs int
	fullBest   float64
	// asha: the same configurations, in the same order, with
	// AshaStoppingSpec and ShouldStop asked after every epoch.
	ashaEpochs, ashaStopped int
	ashaBest                float64
	// bestWobble is the mean relative change of the best configuration's
	// loss from one epoch to the next over its last 5 epochs (of no
	// stopping): how much its result moves by itself.
	bestWobble float64
}

// curve is one configuration's learning curve, trained lazily epoch by
// epoch and kept, so that the replay reuses the full study's training.
type curve struct {
	tr        *toytrain.Trainer
	untrained float64
	losses    []float64 // losses[e-1] after epoch e
}

// at returns the validation loss after epoch e (1-based), training on
// demand; a diverged loss is capped at the untrained one as in trainLoss.
func (c *curve) at(e int) float64 {
	for len(c.losses) < e {
		c.tr.TrainEpoch()
		v := c.tr.ValidationLoss()
		if math.IsNaN(v) || math.IsInf(v, 0) || v > c.untrained {
			v = c.untrained
		}
		c.losses = append(c.losses, v)
	}
	return c.losses[e-1]
}

// curves caches one seed's curves by configuration.
type curves map[string]*curve

func (cs curves) get(x []float64) *curve {
	key := fmt.Sprint(x)
	if c, ok := cs[key]; ok {
		return c
	}
	h := hyper(x)
	tr, err := toytrain.New(h, trainSeed)
	if err != nil {
		panic(fmt.Sprintf("hpobench: the trainer refuses %+v: %v", h, err))
	}
	c := &curve{tr: tr, untrained: tr.ValidationLoss()}
	cs[key] = c
	return c
}

// ashaSpec is the trainer's space with ASHA over epochs: rungs at min,
// min·η, min·η² ... epochs.
func ashaSpec(p *problem, seed int64, minEpochs, epochs, eta int) *trainingv1.StudySpec {
	s := p.spec(trainingv1.StudySpec_RANDOM_SEARCH, seed)
	s.AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{
		MinStepCount: int64(minEpochs), MaxStepCount: int64(epochs), ReductionFactor: int32(eta)}}
	s.MeasurementSelectionType = trainingv1.StudySpec_BEST_MEASUREMENT
	return s
}

// simulate runs a sequential study of n trials of up to epochs epochs:
// suggestions from suggest (nil: replay configs), curves from cs, and,
// when stop is set, its ShouldStop after each epoch but the last. It
// returns the trial-epochs trained, the best value of any epoch, the number of
// trials stopped, and the configurations in order.
func simulate(p *problem, s *hpo.Searcher, replay [][]*trainingv1.Trial_Parameter, n, epochs int, stop bool, cs curves) (used int, best float64, stopped int, configs [][]*trainingv1.Trial_Parameter, err error) {
	best = math.Inf(1)
	trials := make([]*trainingv1.Trial, 0, n)
	for k := range n {
		var ps []*trainingv1.Trial_Parameter
		if replay != nil {
			ps = replay[k]
		} else {
			sug, err := s.Suggest(trials, 1)
			if err != nil || len(sug) != 1 {
				return 0, 0, 0, nil, fmt.Errorf("suggest trial %d: %d suggestions, %v", k+1, len(sug), err)
			}
			ps = sug[0]
		}
		configs = append(configs, ps)
		x, err := p.point(paramValues(ps))
		if err != nil {
			return 0, 0, 0, nil, fmt.Errorf("trial %d: %w", k+1, err)
		}
		c := cs.get(x)
		t := &trainingv1.Trial{Id: strconv.Itoa(k + 1), State: trainingv1.Trial_ACTIVE, Parameters: ps}
		trials = append(trials, t)
		for e := 1; e <= epochs; e++ {
			used++
			m := &trainingv1.Measurement{StepCount: int64(e), Metrics: []*trainingv1.Measurement_Metric{{MetricId: objectiveID, Value: c.at(e)}}}
			t.Measurements = append(t.Measurements, m)
			if stop && e < epochs {
				if halt, _ := s.ShouldStop(trials, k); halt {
					t.EarlyStopped = true
					stopped++
					break
				}
			}
		}
		t.State = trainingv1.Trial_SUCCEEDED
		t.FinalMeasurement = t.Measurements[len(t.Measurements)-1]
		// The study selects BEST_MEASUREMENT: a trial's result is its best
		// epoch (the checkpoint one would keep), on both sides.
		for _, m := range t.Measurements {
			best = min(best, m.Metrics[0].Value)
		}
	}
	return used, best, stopped, configs, nil
}

// runASHA compares the two studies for one seed: n configurations drawn
// by Loom's RANDOM_SEARCH (seeded), as the ASHA paper's experiments pair
// ASHA with random sampling, trained with and without ASHA's stopping.
func runASHA(p *problem, seed int64, n, minEpochs, epochs, eta int) (ashaResult, error) {
	var r ashaResult
	cs := curves{}
	random, err := hpo.New(p.spec(trainingv1.StudySpec_RANDOM_SEARCH, seed), hpo.Options{Seed: seed, MaxTrials: n})
	if err != nil {
		return r, err
	}
	configs, err := random.Suggest(nil, n)
	if err != nil || len(configs) != n {
		return r, fmt.Errorf("random search: %d of %d configurations, %v", len(configs), n, err)
	}
	asha, err := hpo.New(ashaSpec(p, seed, minEpochs, epochs, eta), hpo.Options{Seed: seed, MaxTrials: n})
	if err != nil {
		return r, err
	}
	if r.fullEpochs, r.fullBest, _, _, err = simulate(p, asha, configs, n, epochs, false, cs); err != nil {
		return r, fmt.Errorf("no stopping: %w", err)
	}
	if r.ashaEpochs, r.ashaBest, r.ashaStopped, _, err = simulate(p, asha, configs, n, epochs, true, cs); err != nil {
		return r, fmt.Errorf("asha: %w", err)
	}
	for _, ps := range configs {
		x, err := p.point(paramValues(ps))
		if err != nil {
			return r, err
		}
		if c := cs.get(x); slices.Min(c.losses[:epochs]) == r.fullBest {
			r.bestWobble = wobble(c.losses[:epochs], 5)
			break
		}
	}
	return r, nil
}

// wobble is the mean relative change of ls from one value to the next
// over its last k values.
func wobble(ls []float64, k int) float64 {
	sum, n := 0.0, 0
	for e := max(1, len(ls)-k); e < len(ls); e++ {
		sum += math.Abs(ls[e]-ls[e-1]) / ls[e-1]
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
