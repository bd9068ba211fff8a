package hpo_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loom-ml/loom/libs/hpo"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// curveTrial is a trial with intermediate losses at steps 1, 2, … .
func curveTrial(st trainingv1.Trial_State, losses ...float64) *trainingv1.Trial {
	t := &trainingv1.Trial{State: st}
	for i, v := range losses {
		m := measured(v)
		m.StepCount = int64(i + 1)
		m.ElapsedDuration = durationpb.New(time.Duration(i+1) * 10 * time.Second)
		t.Measurements = append(t.Measurements, m)
	}
	if st == trainingv1.Trial_SUCCEEDED && len(losses) > 0 {
		t.FinalMeasurement = measured(losses[len(losses)-1])
	}
	return t
}

func stoppingSpec(set func(*spec)) *hpo.Searcher {
	s := minimize(dbl("x", 0, 1, lin))
	set(s)
	h, err := hpo.New(s, hpo.Options{})
	if err != nil {
		panic(err)
	}
	return h
}

func TestMedianStopping(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"median", "decay-curve"} {
		s := stoppingSpec(func(s *spec) {
			if name == "median" {
				s.AutomatedStoppingSpec = &trainingv1.StudySpec_MedianAutomatedStoppingSpec_{MedianAutomatedStoppingSpec: &trainingv1.StudySpec_MedianAutomatedStoppingSpec{}}
			} else {
				s.AutomatedStoppingSpec = &trainingv1.StudySpec_DecayCurveStoppingSpec{DecayCurveStoppingSpec: &trainingv1.StudySpec_DecayCurveAutomatedStoppingSpec{}}
			}
		})
		// Completed trials' running averages up to step 2: 1.5, 2.5, 3.5 → median 2.5.
		done := []*trainingv1.Trial{
			curveTrial(trainingv1.Trial_SUCCEEDED, 2, 1, 0.5),
			curveTrial(trainingv1.Trial_SUCCEEDED, 3, 2, 1),
			curveTrial(trainingv1.Trial_SUCCEEDED, 4, 3, 2),
		}
		bad := curveTrial(trainingv1.Trial_ACTIVE, 3, 2.6) // best 2.6 > 2.5
		good := curveTrial(trainingv1.Trial_ACTIVE, 3, 2.4)
		trials := append(append([]*trainingv1.Trial{}, done...), bad, good)
		stop, why := s.ShouldStop(trials, 3)
		if !stop || !strings.Contains(why, "median 2.5") || !strings.Contains(why, "step 2") {
			t.Errorf("%s: bad trial: %v %q, want stopped against median 2.5 at step 2", name, stop, why)
		}
		if stop, why := s.ShouldStop(trials, 4); stop {
			t.Errorf("%s: good trial stopped: %q", name, why)
		}
		// Too few completed trials: never.
		if stop, _ := s.ShouldStop(append(done[:2:2], bad), 2); stop {
			t.Errorf("%s: stopped with %d completed trials (< %d)", name, 2, hpo.MedianMinTrials)
		}
		// Early-stopped trials are not a reference.
		es := curveTrial(trainingv1.Trial_SUCCEEDED, 9, 9)
		es.EarlyStopped = true
		if stop, _ := s.ShouldStop([]*trainingv1.Trial{done[0], done[1], es, bad}, 3); stop {
			t.Errorf("%s: an early-stopped trial counted as completed", name)
		}
		// Only ACTIVE trials stop.
		bad.State = trainingv1.Trial_REQUESTED
		if stop, _ := s.ShouldStop(trials, 3); stop {
			t.Errorf("%s: a REQUESTED trial stopped", name)
		}
	}
}

func TestMedianStoppingElapsedAndMaximize(t *testing.T) {
	t.Parallel()
	s := stoppingSpec(func(s *spec) {
		s.Metrics[0].Goal = trainingv1.StudySpec_MetricSpec_MAXIMIZE
		s.AutomatedStoppingSpec = &trainingv1.StudySpec_MedianAutomatedStoppingSpec_{MedianAutomatedStoppingSpec: &trainingv1.StudySpec_MedianAutomatedStoppingSpec{UseElapsedDuration: true}}
	})
	done := []*trainingv1.Trial{
		curveTrial(trainingv1.Trial_SUCCEEDED, 0.5, 0.6, 0.7),
		curveTrial(trainingv1.Trial_SUCCEEDED, 0.6, 0.7, 0.8),
		curveTrial(trainingv1.Trial_SUCCEEDED, 0.7, 0.8, 0.9),
	}
	// Accuracy: at 10 s the median is 0.6.
	low := curveTrial(trainingv1.Trial_ACTIVE, 0.55)
	high := curveTrial(trainingv1.Trial_ACTIVE, 0.65)
	trials := append(done, low, high)
	if stop, why := s.ShouldStop(trials, 3); !stop || !strings.Contains(why, "10s elapsed") {
		t.Errorf("low accuracy: %v %q, want stopped at 10s elapsed", stop, why)
	}
	if stop, why := s.ShouldStop(trials, 4); stop {
		t.Errorf("high accuracy stopped: %q", why)
	}
}

func TestASHA(t *testing.T) {
	t.Parallel()
	s := stoppingSpec(func(s *spec) {
		s.AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{
			MinStepCount: 1, MaxStepCount: 9, ReductionFactor: 3}}
	})
	// Rungs at steps 1 and 3 (9 is the end). Six trials reached rung 1 with
	// losses 1..6: the top ⌊6/3⌋ = 2 continue.
	var trials []*trainingv1.Trial
	for i := 1; i <= 6; i++ {
		trials = append(trials, curveTrial(trainingv1.Trial_ACTIVE, float64(i)))
	}
	for i, want := range []bool{false, false, true, true, true, true} {
		stop, why := s.ShouldStop(trials, i)
		if stop != want {
			t.Errorf("loss %d at rung 1: stop %v (%q), want %v", i+1, stop, why, want)
		}
		if stop && !strings.Contains(why, fmt.Sprintf("ranks %d of the 6", i+1)) {
			t.Errorf("reason %q does not give the rank", why)
		}
	}
	// Fewer trials than the reduction factor at a rung: only the best one
	// continues.
	two := []*trainingv1.Trial{curveTrial(trainingv1.Trial_ACTIVE, 1), curveTrial(trainingv1.Trial_ACTIVE, 2)}
	if stop, _ := s.ShouldStop(two, 0); stop {
		t.Error("the best of two stopped")
	}
	if stop, _ := s.ShouldStop(two, 1); !stop {
		t.Error("the second of two continued")
	}
	// At rung 3 the trial is ranked among those that reached step 3 (by
	// their value at the first measurement at or past it), not at rung 1.
	r3 := []*trainingv1.Trial{
		curveTrial(trainingv1.Trial_SUCCEEDED, 1, 1, 0.1, 0.1),
		curveTrial(trainingv1.Trial_SUCCEEDED, 1, 1, 0.2),
		curveTrial(trainingv1.Trial_ACTIVE, 9, 9, 0.15, 0.3), // at rung 3: 0.15, 2nd of 3
		curveTrial(trainingv1.Trial_ACTIVE, 0.01),            // rung 1 only
	}
	if stop, why := s.ShouldStop(r3, 2); !stop || !strings.Contains(why, "rung step 3") {
		t.Errorf("rung 3: %v %q, want stopped at rung step 3 (second of 3, top 1 continues)", stop, why)
	}
	// Past max_step_count a trial is done, not stopped.
	long := curveTrial(trainingv1.Trial_ACTIVE, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9)
	if stop, _ := s.ShouldStop(append(r3, long), 4); stop {
		t.Error("a trial past max_step_count was stopped")
	}
	// Infeasible trials do not compete.
	inf := curveTrial(trainingv1.Trial_INFEASIBLE, 0)
	if stop, _ := s.ShouldStop([]*trainingv1.Trial{inf, curveTrial(trainingv1.Trial_ACTIVE, 1)}, 1); stop {
		t.Error("stopped by an infeasible trial")
	}
}

// TestASHABestMeasurement: with BEST_MEASUREMENT a trial is ranked at a
// rung on its best value up to the rung, as the study judges it, so one
// unlucky epoch on a noisy curve does not stop it; with LAST_MEASUREMENT
// the same curves stop it.
func TestASHABestMeasurement(t *testing.T) {
	t.Parallel()
	asha := func(sel trainingv1.StudySpec_MeasurementSelectionType) *hpo.Searcher {
		return stoppingSpec(func(s *spec) {
			s.MeasurementSelectionType = sel
			s.AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{
				MinStepCount: 3, MaxStepCount: 9, ReductionFactor: 3}}
		})
	}
	trials := []*trainingv1.Trial{
		curveTrial(trainingv1.Trial_SUCCEEDED, 1, 0.9, 0.5, 0.4),
		curveTrial(trainingv1.Trial_SUCCEEDED, 1, 0.9, 0.6),
		curveTrial(trainingv1.Trial_ACTIVE, 1, 0.3, 0.8), // at rung 3: 0.8 last, 0.3 best
	}
	if stop, why := asha(trainingv1.StudySpec_BEST_MEASUREMENT).ShouldStop(trials, 2); stop {
		t.Errorf("BEST_MEASUREMENT: stopped on one bad epoch (best 0.3 ranks first): %q", why)
	}
	if stop, why := asha(trainingv1.StudySpec_LAST_MEASUREMENT).ShouldStop(trials, 2); !stop || !strings.Contains(why, "ranks 3 of the 3") {
		t.Errorf("LAST_MEASUREMENT: %v %q, want stopped ranking 3 of the 3 on 0.8", stop, why)
	}
}

func TestNoStoppingSpec(t *testing.T) {
	t.Parallel()
	s := stoppingSpec(func(*spec) {})
	trials := []*trainingv1.Trial{curveTrial(trainingv1.Trial_SUCCEEDED, 0), curveTrial(trainingv1.Trial_ACTIVE, 100)}
	if stop, why := s.ShouldStop(trials, 1); stop || why != "" {
		t.Errorf("ShouldStop without a spec = %v %q", stop, why)
	}
	if stop, _ := s.ShouldStop(trials, 7); stop {
		t.Error("out of range index stopped")
	}
}

// TestASHANotAtTheLastStep: a trial's measurement at max_step_count is its
// last (the program ends there), so stopping it then saves no step and only
// turns a complete result into an early-stopped one: ASHA issues no stop
// there, though the same trial one step short is stopped. Without
// max_step_count ASHA cannot tell the last step from any other and stops
// the trial on it, which is why docs/training.md's example sets
// maxStepCount to its trainer's --epochs.
func TestASHANotAtTheLastStep(t *testing.T) {
	t.Parallel()
	asha := func(maxSteps int64) *hpo.Searcher {
		return stoppingSpec(func(s *spec) {
			s.AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{
				MinStepCount: 1, MaxStepCount: maxSteps, ReductionFactor: 3}}
		})
	}
	// Epochs 1..n of a loss that starts at start and falls by 0.01 a step.
	run := func(st trainingv1.Trial_State, start float64, n int) *trainingv1.Trial {
		losses := make([]float64, n)
		for i := range losses {
			losses[i] = start - 0.01*float64(i)
		}
		return curveTrial(st, losses...)
	}
	// Three trials reached rung 9 of 20 epochs (rungs 1, 3, 9): the worst,
	// trial 2, is outside the top ⌊3/3⌋ = 1 at every rung.
	at := func(steps int) []*trainingv1.Trial {
		return []*trainingv1.Trial{
			run(trainingv1.Trial_SUCCEEDED, 1, 20),
			run(trainingv1.Trial_SUCCEEDED, 2, 20),
			run(trainingv1.Trial_ACTIVE, 3, steps),
		}
	}
	if stop, why := asha(20).ShouldStop(at(19), 2); !stop || !strings.Contains(why, "rung step 9") {
		t.Fatalf("one step short of max_step_count 20: %v %q, want stopped at rung step 9", stop, why)
	}
	if stop, why := asha(20).ShouldStop(at(20), 2); stop {
		t.Errorf("at its last step (max_step_count 20) the trial was stopped, which saves nothing: %q", why)
	}
	if stop, _ := asha(0).ShouldStop(at(20), 2); !stop {
		t.Error("without max_step_count the trial at step 20 was not stopped: the test no longer shows why the docs' example sets maxStepCount")
	}
}
