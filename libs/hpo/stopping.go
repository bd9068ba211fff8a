package hpo

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// MedianMinTrials is how many completed trials with measurements at or
// before a trial's current step median stopping needs before it stops
// anything: a median of fewer says little.
const MedianMinTrials = 3

const defaultReductionFactor = 3

// point is one intermediate measurement of the first metric: its position
// (step_count, or elapsed seconds) and value.
type point struct {
	at, v float64
}

// curve is trial t's intermediate measurements of the first metric, in
// reported order.
func (s *Searcher) curve(t *trainingv1.Trial, elapsed bool) []point {
	var out []point
	for _, m := range t.GetMeasurements() {
		v, ok := s.value(m)
		if !ok {
			continue
		}
		at := float64(m.GetStepCount())
		if elapsed {
			at = m.GetElapsedDuration().AsDuration().Seconds()
		}
		out = append(out, point{at, v})
	}
	return out
}

// ShouldStop reports whether the study's automated stopping stops trial
// trials[i] (ACTIVE, with intermediate measurements) now, with the reason
// a person reads in the trial. Without a stopping spec, or for a trial in
// another state, it is always false.
//
// Median stopping (median_automated_stopping_spec, and
// decay_curve_stopping_spec, which Loom treats the same): the trial stops
// when its best value so far is strictly worse than the median, over the
// completed trials (SUCCEEDED, not early-stopped; at least
// MedianMinTrials), of their running averages up to the trial's last
// step (or elapsed time, with use_elapsed_duration).
//
// ASHA (asha_stopping_spec): rungs are at min_step_count·rf^k below
// max_step_count. At the highest rung the trial has reached, its value
// (at its first measurement at or past the rung; with BEST_MEASUREMENT
// the best of its measurements up to that one) is ranked among every
// feasible trial that reached that rung; it continues only when within
// the top ⌊N/rf⌋ (the best one when N < rf).
func (s *Searcher) ShouldStop(trials []*trainingv1.Trial, i int) (bool, string) {
	if i < 0 || i >= len(trials) || trials[i].GetState() != trainingv1.Trial_ACTIVE {
		return false, ""
	}
	switch st := s.spec.GetAutomatedStoppingSpec().(type) {
	case *trainingv1.StudySpec_MedianAutomatedStoppingSpec_:
		return s.median(trials, i, st.MedianAutomatedStoppingSpec.GetUseElapsedDuration(), "median stopping")
	case *trainingv1.StudySpec_DecayCurveStoppingSpec:
		return s.median(trials, i, st.DecayCurveStoppingSpec.GetUseElapsedDuration(), "decay-curve stopping (applied as median stopping)")
	case *trainingv1.StudySpec_AshaStoppingSpec_:
		return s.asha(trials, i, st.AshaStoppingSpec)
	}
	return false, ""
}

func (s *Searcher) median(trials []*trainingv1.Trial, i int, elapsed bool, name string) (bool, string) {
	c := s.curve(trials[i], elapsed)
	if len(c) == 0 {
		return false, ""
	}
	at := math.Inf(-1)
	best := c[0].v
	for _, p := range c {
		at = max(at, p.at)
		if s.Better(p.v, best) {
			best = p.v
		}
	}
	var avgs []float64
	for j, t := range trials {
		if j == i || t.GetState() != trainingv1.Trial_SUCCEEDED || t.GetEarlyStopped() {
			continue
		}
		sum, n := 0.0, 0
		for _, p := range s.curve(t, elapsed) {
			if p.at <= at {
				sum += p.v
				n++
			}
		}
		if n > 0 {
			avgs = append(avgs, sum/float64(n))
		}
	}
	if len(avgs) < MedianMinTrials {
		return false, ""
	}
	slices.Sort(avgs)
	k := len(avgs)
	med := avgs[k/2]
	if k%2 == 0 {
		med = (avgs[k/2-1] + avgs[k/2]) / 2
	}
	if !s.Better(med, best) {
		return false, ""
	}
	unit := "step " + strconv.FormatFloat(at, 'f', -1, 64)
	if elapsed {
		unit = strconv.FormatFloat(at, 'f', -1, 64) + "s elapsed"
	}
	return true, fmt.Sprintf("%s: best %s so far %.6g at %s is worse than the median %.6g of %d completed trials' running averages up to then",
		name, s.metric, best, unit, med, k)
}

func (s *Searcher) asha(trials []*trainingv1.Trial, i int, a *trainingv1.StudySpec_AshaStoppingSpec) (bool, string) {
	rf := int64(a.GetReductionFactor())
	if rf < 2 {
		rf = defaultReductionFactor
	}
	minS := max(1, a.GetMinStepCount())
	maxS := a.GetMaxStepCount()
	c := s.curve(trials[i], false)
	if len(c) == 0 {
		return false, ""
	}
	reached := int64(math.MinInt64)
	for _, p := range c {
		reached = max(reached, int64(p.at))
	}
	if maxS > 0 && reached >= maxS {
		return false, "" // done: no rung is left to promote to
	}
	rung := int64(-1)
	for r := minS; r <= reached && (maxS == 0 || r < maxS); r *= rf {
		rung = r
		if r > math.MaxInt64/rf {
			break
		}
	}
	if rung < 0 {
		return false, ""
	}
	// A trial's value at the rung is its objective as of its first
	// measurement at or past the rung, as the study would judge it
	// then: that measurement's value (LAST_MEASUREMENT), or the best of
	// the measurements up to it (BEST_MEASUREMENT: on a noisy learning
	// curve a trial is not ranked on one unlucky epoch).
	at := func(t *trainingv1.Trial) (float64, bool) {
		c := s.curve(t, false)
		first, ok := 0.0, false
		firstAt := math.Inf(1)
		for _, p := range c {
			if p.at >= float64(rung) && p.at < firstAt {
				first, firstAt, ok = p.v, p.at, true
			}
		}
		if ok && s.best {
			for _, p := range c {
				if p.at <= firstAt && s.Better(p.v, first) {
					first = p.v
				}
			}
		}
		return first, ok
	}
	mine, ok := at(trials[i])
	if !ok {
		return false, ""
	}
	var vals []float64
	for _, t := range trials {
		if t.GetState() == trainingv1.Trial_INFEASIBLE {
			continue
		}
		if v, ok := at(t); ok {
			vals = append(vals, v)
		}
	}
	keep := len(vals) / int(rf)
	top := max(keep, 1)
	// Rank: 1 + the number of strictly better values.
	rank := 1
	for _, v := range vals {
		if s.Better(v, mine) {
			rank++
		}
	}
	if rank <= top {
		return false, ""
	}
	return true, fmt.Sprintf("ASHA: %s %.6g at rung step %d ranks %d of the %d trials that reached it; only the top %d (1/%d) continue",
		s.metric, mine, rung, rank, len(vals), top, rf)
}
