package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/hpo"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// These tests replace the search's decisions (not parallel: they set the
// package's hooks, which the parallel tests run after).

// stopTrialOneAtStep2 makes the search stop trial 1 once it has two
// measurements, and returns what puts the search back.
func stopTrialOneAtStep2() func() {
	saved := shouldStop
	shouldStop = func(_ *hpo.Searcher, trials []*trainingv1.Trial, i int) (bool, string) {
		return trials[i].GetId() == "1" && len(trials[i].GetMeasurements()) >= 2, "below the median at step 2"
	}
	return func() { shouldStop = saved }
}

// runningTrial creates the tuning job spec in s and runs its first trial's
// job, returning the job's name and what reports its val_loss at a step.
func runningTrial(t *testing.T, s *State, spec *eventsv1.CreateHyperparameterTuningJob) (Name, func(step int64, v float64) *eventsv1.MetricsReported) {
	t.Helper()
	feed(t, s, spec)
	tr := active(tuningOf(t, s, tunName))[0]
	n, _ := ParseName(tr.GetCustomJob(), CustomJobs)
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_RUNNING))
	return n, func(step int64, v float64) *eventsv1.MetricsReported {
		return &eventsv1.MetricsReported{Job: n.Job(), Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{{Step: step, Values: map[string]float64{"val_loss": v}}}}
	}
}

// TestEarlyStopStopsTheTrial: when the search stops a trial on a
// measurement, its job is cancelled by the service (no user: the
// scheduler's cancelled_by stays "") and the trial ends
// SUCCEEDED, early_stopped, with its last measurement; a node that does not
// run the trial cannot report for it.
func TestEarlyStopStopsTheTrial(t *testing.T) {
	defer stopTrialOneAtStep2()()
	s := NewState()
	n, point := runningTrial(t, s, tuningJob(tunName, 2, 1, 0))
	if c, err := s.Handle(t0, Input{Payload: point(1, 5), Signer: "nodes/projects/p/clusters/x/nodes/other-0001"}); c != nil || !errors.Is(err, ErrIgnored) {
		t.Fatalf("a stranger node's metrics: %v %v", c, err)
	}
	// A host of the same name in another cluster (another project's) is
	// another node.
	if c, err := s.Handle(t0, Input{Payload: point(1, 5), Signer: "nodes/projects/q/clusters/z/nodes/n-0001"}); c != nil || !errors.Is(err, ErrIgnored) {
		t.Fatalf("metrics from another cluster's n-0001: %v %v", c, err)
	}
	c1 := feed(t, s, point(1, 5))
	if tj, _ := emitted[*eventsv1.HyperparameterTuningJobChanged](c1); len(tj) != 0 {
		t.Fatalf("a measurement emitted the tuning job: %v", c1.Emits)
	}
	if tc, _ := emitted[*eventsv1.TrialChanged](c1); len(tc) != 1 || len(tc[0].GetTrial().GetMeasurements()) != 1 {
		t.Fatalf("a measurement emitted %v", c1.Emits)
	}
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_ACTIVE || len(got.GetMeasurements()) != 1 {
		t.Fatalf("after step 1: %v", got)
	}
	c := step(t, s, t0, Input{Payload: point(2, 4), Signer: "nodes/projects/p/clusters/cj-201/nodes/n-0001"})
	cancels, es := emitted[*eventsv1.CancelJob](c)
	got := tuningOf(t, s, tunName).GetTrials()[0]
	if got.GetState() != trainingv1.Trial_STOPPING || !got.GetEarlyStopped() || len(cancels) != 1 || es[0].Principal != "" || cancels[0].GetUser() != "" {
		t.Fatalf("stopped: %v, emitted %v", got, c.Emits)
	}
	feed(t, s, point(3, 1)) // late, still taken
	feed(t, s, jobIs(n.Job(), loomv1.JobState_CANCELLED))
	j := tuningOf(t, s, tunName)
	got = j.GetTrials()[0]
	if got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetFinalMeasurement().GetStepCount() != 3 || len(j.GetTrials()) != 2 {
		t.Fatalf("early-stopped trial %v", got)
	}
	if cj := cjOf(t, s, n.String()); !strings.Contains(cj.GetError().GetMessage(), "below the median") {
		t.Fatalf("its job's error %v", cj.GetError())
	}
	if !got.GetEarlyStopped() {
		t.Fatalf("a trial whose program the cancel killed is not early-stopped: %v", got)
	}
}

// TestStopAfterTheProgramExitedIsACompleteTrial is the new-user
// walkthrough's "SUCCEEDED (stopped early)" trial that ran 20 of 20 steps:
// the built-in trainer runs its epochs within one of the agent's metrics
// intervals, so the search reads the points, and stops the trial, after
// the program exited 0; the scheduler takes the cancel before the step's
// end and the job ends CANCELLED. Every node's step end says the program
// ran to its end (STEP_EXITED, code 0): the trial is complete, not
// early-stopped, judged by the study's measurement selection.
func TestStopAfterTheProgramExitedIsACompleteTrial(t *testing.T) {
	defer stopTrialOneAtStep2()()
	s := NewState()
	spec := tuningJob(tunName, 2, 1, 0)
	spec.GetTuningJob().GetStudySpec().MeasurementSelectionType = trainingv1.StudySpec_BEST_MEASUREMENT
	n, point := runningTrial(t, s, spec)
	// The program's every point in one report, read after it exited.
	all := point(1, 5)
	all.Points = append(all.Points, point(2, 2).GetPoints()[0], point(3, 4).GetPoints()[0])
	feed(t, s, all)
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_STOPPING || !got.GetEarlyStopped() {
		t.Fatalf("not stopped: %v", got)
	}
	handle(t, s, t0, Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: 1, Node: "n-0001", State: eventsv1.StepState_STEP_EXITED}})
	c := handle(t, s, t0, Input{Payload: jobIs(n.Job(), loomv1.JobState_CANCELLED)})
	// Watchers (the gateway's, the bridge's) see the job end SUCCEEDED,
	// never cancelled by the search.
	cs, _ := emitted[*eventsv1.CustomJobChanged](c)
	if i := slices.IndexFunc(cs, func(e *eventsv1.CustomJobChanged) bool { return e.GetCustomJob().GetName() == n.String() }); i < 0 ||
		cs[i].GetCustomJob().GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || cs[i].GetCustomJob().GetError() != nil {
		t.Fatalf("the job's end emitted %v", cs)
	}
	got := tuningOf(t, s, tunName).GetTrials()[0]
	if got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetEarlyStopped() {
		t.Fatalf("a trial whose program exited 0 before the cancel: %v", got)
	}
	if m := got.GetFinalMeasurement(); m.GetStepCount() != 2 {
		t.Fatalf("final measurement %v, want the best (step 2), as the study selects", m)
	}
	if cj := cjOf(t, s, n.String()); cj.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || cj.GetError() != nil {
		t.Fatalf("a complete trial's custom job %v %v, want SUCCEEDED without an error", cj.GetState(), cj.GetError())
	}

	// A program that exited 0 on one node but was killed on another was
	// stopped early.
	s = NewState()
	n, point = runningTrial(t, s, spec)
	feed(t, s, point(1, 5))
	feed(t, s, point(2, 2))
	two := jobIs(n.Job(), loomv1.JobState_RUNNING)
	two.GetJob().Nodes = []string{"n-0001", "n-0002"}
	feed(t, s, two)
	handle(t, s, t0, Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: 1, Node: "n-0001", State: eventsv1.StepState_STEP_EXITED}})
	handle(t, s, t0, Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: 1, Node: "n-0002", State: eventsv1.StepState_STEP_KILLED}})
	ended := jobIs(n.Job(), loomv1.JobState_CANCELLED)
	ended.GetJob().Nodes = two.GetJob().GetNodes()
	handle(t, s, t0, Input{Payload: ended})
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_SUCCEEDED || !got.GetEarlyStopped() {
		t.Fatalf("a trial killed on one of its nodes: %v", got)
	}
}

// TestStopAfterTheLastStepIsACompleteTrial: the search stops a trial at
// step 2 of ASHA's max_step_count 3; before the cancel reaches its program
// the program reports step 3, its last, and the cancel then kills it while
// it winds up (STEP_KILLED, the job CANCELLED). Its result is complete: the
// trial is SUCCEEDED without early_stopped, judged by the study's
// measurement selection (BEST: step 2, where an early-stopped trial's is
// its last, step 3). The same trial short of its last step, or a study
// whose stopping spec does not say where trials end, stays stopped early.
func TestStopAfterTheLastStepIsACompleteTrial(t *testing.T) {
	defer stopTrialOneAtStep2()()
	withLast := func(last int64) *eventsv1.CreateHyperparameterTuningJob {
		spec := tuningJob(tunName, 2, 1, 0)
		spec.GetTuningJob().GetStudySpec().AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{
			AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{MinStepCount: 1, MaxStepCount: last, ReductionFactor: 3}}
		return spec
	}
	for _, tc := range []struct {
		name  string
		spec  *eventsv1.CreateHyperparameterTuningJob
		steps int64
		early bool
		final int64
	}{
		{"last step reported", withLast(3), 3, false, 2},
		{"past the last step", withLast(3), 4, false, 2},
		{"one step short", withLast(4), 3, true, 3},
		{"no last step known (median stopping)", tuningJob(tunName, 2, 1, 0), 3, true, 3},
	} {
		s := NewState()
		n, point := runningTrial(t, s, tc.spec)
		feed(t, s, point(1, 5))
		feed(t, s, point(2, 2))
		if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_STOPPING || !got.GetEarlyStopped() {
			t.Fatalf("%s: not stopped: %v", tc.name, got)
		}
		for st := int64(3); st <= tc.steps; st++ {
			feed(t, s, point(st, 4))
		}
		// step sends the node's STEP_KILLED before the job's end: the
		// cancel killed the program.
		feed(t, s, jobIs(n.Job(), loomv1.JobState_CANCELLED))
		got := tuningOf(t, s, tunName).GetTrials()[0]
		if got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetEarlyStopped() != tc.early || got.GetFinalMeasurement().GetStepCount() != tc.final {
			t.Errorf("%s: trial %v; want SUCCEEDED, early_stopped %v, final measurement at step %d", tc.name, got, tc.early, tc.final)
		}
		// Its CustomJob says what the trial says: a complete trial's
		// job SUCCEEDED without an error, a stopped one's was cancelled
		// by the search.
		cj := cjOf(t, s, n.String())
		if tc.early && (cj.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED || !strings.Contains(cj.GetError().GetMessage(), "stopped early by the search")) ||
			!tc.early && (cj.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || cj.GetError() != nil || cj.GetEndTime() == nil) {
			t.Errorf("%s: its custom job %v %v (early_stopped %v)", tc.name, cj.GetState(), cj.GetError(), tc.early)
		}
	}
}

// TestStopTooLateIsACompleteTrial: when the search stops a trial whose
// program ends on its own before the cancel reaches the scheduler (its job
// COMPLETED, not CANCELLED), the trial is complete: SUCCEEDED, not
// early-stopped, judged by the study's measurement selection, so that the
// search learns from it.
func TestStopTooLateIsACompleteTrial(t *testing.T) {
	defer stopTrialOneAtStep2()()
	s := NewState()
	spec := tuningJob(tunName, 2, 1, 0)
	spec.GetTuningJob().GetStudySpec().MeasurementSelectionType = trainingv1.StudySpec_BEST_MEASUREMENT
	n, point := runningTrial(t, s, spec)
	feed(t, s, point(1, 5))
	feed(t, s, point(2, 2))
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_STOPPING || !got.GetEarlyStopped() {
		t.Fatalf("not stopped: %v", got)
	}
	feed(t, s, point(3, 4))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_COMPLETED))
	got := tuningOf(t, s, tunName).GetTrials()[0]
	if got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetEarlyStopped() {
		t.Fatalf("a trial that ran to its end: %v", got)
	}
	if m := got.GetFinalMeasurement(); m.GetStepCount() != 2 {
		t.Fatalf("final measurement %v, want the best (step 2), as the study selects", m)
	}
}

// TestExhaustedSearchEndsTheStudy: a search with no more points (a grid
// smaller than max_trial_count) ends the study once its trials ended.
func TestExhaustedSearchEndsTheStudy(t *testing.T) {
	defer func(f func(*hpo.Searcher, []*trainingv1.Trial, int) ([][]*trainingv1.Trial_Parameter, error)) {
		suggest = f
	}(suggest)
	real := suggest
	suggest = func(s *hpo.Searcher, trials []*trainingv1.Trial, n int) ([][]*trainingv1.Trial_Parameter, error) {
		n = min(n, 3-len(trials)) // a grid of 3 points
		if n <= 0 {
			return nil, nil
		}
		return real(s, trials, n)
	}
	s := NewState()
	feed(t, s, tuningJob(tunName, 10, 2, 0))
	for len(active(tuningOf(t, s, tunName))) > 0 {
		runTrial(t, s, active(tuningOf(t, s, tunName))[0], true)
	}
	if j := tuningOf(t, s, tunName); j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || len(j.GetTrials()) != 3 {
		t.Fatalf("%v", j)
	}
}

// TestUserCancelIsNotTheSearchsStop: a trial whose CustomJob its owner
// cancelled is not stopped early by the search after (a measurement that
// would have it stop coming while the cancel is under way): its job's end
// is the owner's cancel, which the search neither claims nor undoes. Were
// the trial marked early-stopped, its job ending CANCELLED after the
// program reported its last step would read as the search's stop that
// came too late, and its CustomJob would be rewritten SUCCEEDED, the
// owner's cancel erased.
func TestUserCancelIsNotTheSearchsStop(t *testing.T) {
	defer stopTrialOneAtStep2()()
	spec := tuningJob(tunName, 2, 1, 0)
	spec.GetTuningJob().GetStudySpec().AutomatedStoppingSpec = &trainingv1.StudySpec_AshaStoppingSpec_{
		AshaStoppingSpec: &trainingv1.StudySpec_AshaStoppingSpec{MinStepCount: 1, MaxStepCount: 3, ReductionFactor: 3}}
	s := NewState()
	n, point := runningTrial(t, s, spec)
	feed(t, s, point(1, 5))
	step(t, s, t0, Input{Payload: &eventsv1.CancelTraining{Name: n.String()}, Principal: "users/alice"})
	if cj := cjOf(t, s, n.String()); cj.GetState() != trainingv1.JobState_JOB_STATE_CANCELLING {
		t.Fatalf("after its owner's cancel, the custom job is %v", cj.GetState())
	}
	feed(t, s, point(2, 2)) // the search would stop it here
	feed(t, s, point(3, 4)) // its last step
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetEarlyStopped() {
		t.Fatalf("a trial whose job its owner cancelled was stopped early by the search: %v", got)
	}
	feed(t, s, jobIs(n.Job(), loomv1.JobState_CANCELLED))
	cj := cjOf(t, s, n.String())
	if cj.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED || !strings.Contains(cj.GetError().GetMessage(), "cancelled by users/alice") {
		t.Fatalf("its custom job ended %v %v, want CANCELLED by its owner", cj.GetState(), cj.GetError())
	}
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetEarlyStopped() || got.GetState() == trainingv1.Trial_SUCCEEDED {
		t.Fatalf("a trial whose job its owner cancelled ended %v", got)
	}
}
