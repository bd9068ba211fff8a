package domain

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// endWithoutMetrics runs the study's first trial's job to COMPLETED at t0
// without any metrics seen, as when the job's end overtakes the metrics
// on their own topic; it returns the trial's scheduler job name.
func endWithoutMetrics(t *testing.T, s *State) string {
	t.Helper()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_COMPLETED))
	j := tuningOf(t, s, tunName)
	if len(j.GetTrials()) != 1 || j.GetTrials()[0].GetState() != trainingv1.Trial_ACTIVE {
		t.Fatalf("a trial whose job ended before its metrics came is not finalizing: %v", j)
	}
	return n.Job()
}

// TestTrialWaitsForMetricsAfterItsJobEnds: the job's end seen before the
// trial's metrics (JobChanged and MetricsReported travel on different
// topics) keeps the trial ACTIVE; the metrics, arriving within the grace,
// make it SUCCEEDED with their value, and metrics after that change nothing.
func TestTrialWaitsForMetricsAfterItsJobEnds(t *testing.T) {
	t.Parallel()
	s := NewState()
	job := endWithoutMetrics(t, s)
	if cs := s.Tick(t0.Add(DefaultMetricGrace - time.Second)); len(cs) != 0 {
		t.Fatalf("judged before the grace was over: %v", cs)
	}
	metrics := func(v float64) *eventsv1.MetricsReported {
		return &eventsv1.MetricsReported{Job: job, Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{
			{Step: 7, Values: map[string]float64{"val_loss": v}}}}
	}
	step(t, s, t0.Add(10*time.Second), Input{Payload: metrics(0.25)})
	j := tuningOf(t, s, tunName)
	tr := j.GetTrials()[0]
	if tr.GetState() != trainingv1.Trial_SUCCEEDED || tr.GetFinalMeasurement().GetStepCount() != 7 ||
		tr.GetFinalMeasurement().GetMetrics()[0].GetValue() != 0.25 {
		t.Fatalf("trial after its late metrics: %v", tr)
	}
	if j.GetBestTrial() != "1" || len(j.GetTrials()) != 2 {
		t.Fatalf("the study did not move on: best %q, %d trials", j.GetBestTrial(), len(j.GetTrials()))
	}
	// A redelivery, or a point after the judgement: ignored.
	if c := step(t, s, t0.Add(20*time.Second), Input{Payload: metrics(0.01)}); c != nil {
		t.Fatalf("metrics after the trial was judged changed it: %v", c.Emits)
	}
	if fm := tuningOf(t, s, tunName).GetTrials()[0].GetFinalMeasurement(); fm.GetMetrics()[0].GetValue() != 0.25 {
		t.Fatalf("final measurement changed to %v", fm)
	}
}

// TestTrialWithoutMetricsIsInfeasibleAfterTheGrace: a trial whose job
// succeeded and whose metrics never come is judged by the tick once
// State.MetricGrace from the job's end is over: INFEASIBLE, saying how to
// report the metric; metrics after that change nothing.
func TestTrialWithoutMetricsIsInfeasibleAfterTheGrace(t *testing.T) {
	t.Parallel()
	s := NewState()
	s.MetricGrace = 90 * time.Second
	job := endWithoutMetrics(t, s)
	if cs := s.Tick(t0.Add(89 * time.Second)); len(cs) != 0 {
		t.Fatalf("judged before the grace was over: %v", cs)
	}
	cs := s.Tick(t0.Add(90 * time.Second))
	if len(cs) != 1 {
		t.Fatalf("tick at the grace's end: %d changes, want 1", len(cs))
	}
	s.Apply(cs[0])
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	if tr.GetState() != trainingv1.Trial_INFEASIBLE || !strings.Contains(tr.GetInfeasibleReason(), `no finite value of metric "val_loss"`) {
		t.Fatalf("trial after the grace: %v", tr)
	}
	if cs := s.Tick(t0.Add(200 * time.Second)); len(cs) != 0 {
		t.Fatalf("a judged trial is judged again: %v", cs)
	}
	late := &eventsv1.MetricsReported{Job: job, Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{
		{Step: 1, Values: map[string]float64{"val_loss": 0.5}}}}
	if c := step(t, s, t0.Add(100*time.Second), Input{Payload: late}); c != nil {
		t.Fatalf("metrics after the trial was judged changed it: %v", c.Emits)
	}
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_INFEASIBLE || got.GetFinalMeasurement() != nil {
		t.Fatalf("a late metric revived the trial: %v", got)
	}
}

// TestOneStepFromTwoSources: the hypertune lines and the TensorBoard
// scalars of one step come in separate MetricsReported events; the
// measurement of that step holds both, whatever their order, and a step
// reported again (a resumed run) replaces only the metrics it names.
func TestOneStepFromTwoSources(t *testing.T) {
	t.Parallel()
	s := NewState()
	job := endWithoutMetrics(t, s)
	// The TensorBoard scalars first: no value of the study's metric yet,
	// so the trial still waits.
	step(t, s, t0.Add(time.Second), Input{Payload: &eventsv1.MetricsReported{Job: job, Node: "n-0001",
		Points: []*eventsv1.MetricsReported_Point{{Step: 7, Values: map[string]float64{"validation/loss": 0.5}}}}})
	if tr := tuningOf(t, s, tunName).GetTrials()[0]; tr.GetState() != trainingv1.Trial_ACTIVE {
		t.Fatalf("judged on metrics without the study's: %v", tr)
	}
	step(t, s, t0.Add(2*time.Second), Input{Payload: &eventsv1.MetricsReported{Job: job, Node: "n-0001",
		Points: []*eventsv1.MetricsReported_Point{{Step: 7, Values: map[string]float64{"val_loss": 0.25}}}}})
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	fm := tr.GetFinalMeasurement()
	if tr.GetState() != trainingv1.Trial_SUCCEEDED || len(fm.GetMetrics()) != 2 {
		t.Fatalf("trial after both sources of step 7: %v", tr)
	}
	got := map[string]float64{}
	for _, m := range fm.GetMetrics() {
		got[m.GetMetricId()] = m.GetValue()
	}
	if got["val_loss"] != 0.25 || got["validation/loss"] != 0.5 {
		t.Fatalf("step 7 holds %v, want both sources' values", got)
	}
}

// TestInfinityIsNoMeasurement: the agent sends ±Inf (a loss that blew up
// is kept in the job's series), but a trial is judged by finite values
// only, as the search judges them: an Inf point neither ends the wait for
// the study's metric nor becomes the final measurement; a trial with no
// finite value is INFEASIBLE, saying so.
func TestInfinityIsNoMeasurement(t *testing.T) {
	t.Parallel()
	s := NewState()
	job := endWithoutMetrics(t, s)
	step(t, s, t0.Add(time.Second), Input{Payload: &eventsv1.MetricsReported{Job: job, Node: "n-0001",
		Points: []*eventsv1.MetricsReported_Point{{Step: 9, Values: map[string]float64{"val_loss": math.Inf(1)}}}}})
	if tr := tuningOf(t, s, tunName).GetTrials()[0]; tr.GetState() != trainingv1.Trial_ACTIVE {
		t.Fatalf("judged on an infinite value: %v", tr)
	}
	step(t, s, t0.Add(2*time.Second), Input{Payload: &eventsv1.MetricsReported{Job: job, Node: "n-0001",
		Points: []*eventsv1.MetricsReported_Point{{Step: 7, Values: map[string]float64{"val_loss": 0.3}}}}})
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	if tr.GetState() != trainingv1.Trial_SUCCEEDED || tr.GetFinalMeasurement().GetStepCount() != 7 ||
		tr.GetFinalMeasurement().GetMetrics()[0].GetValue() != 0.3 {
		t.Fatalf("final measurement %v, want step 7's 0.3 (step 9's is +Inf)", tr.GetFinalMeasurement())
	}

	s = NewState()
	job = endWithoutMetrics(t, s)
	step(t, s, t0.Add(time.Second), Input{Payload: &eventsv1.MetricsReported{Job: job, Node: "n-0001",
		Points: []*eventsv1.MetricsReported_Point{{Step: 9, Values: map[string]float64{"val_loss": math.Inf(-1)}}}}})
	cs := s.Tick(t0.Add(DefaultMetricGrace))
	if len(cs) != 1 {
		t.Fatalf("tick at the grace's end: %d changes, want 1", len(cs))
	}
	s.Apply(cs[0])
	if tr := tuningOf(t, s, tunName).GetTrials()[0]; tr.GetState() != trainingv1.Trial_INFEASIBLE ||
		!strings.Contains(tr.GetInfeasibleReason(), `no finite value of metric "val_loss"`) {
		t.Fatalf("a trial of -Inf alone: %v", tr)
	}
}

func TestMergeMeasurementReplacesOnlyNamedMetrics(t *testing.T) {
	t.Parallel()
	old := &trainingv1.Measurement{StepCount: 3, Metrics: []*trainingv1.Measurement_Metric{{MetricId: "a", Value: 1}, {MetricId: "b", Value: 2}}}
	m := mergeMeasurement(old, &trainingv1.Measurement{StepCount: 3, Metrics: []*trainingv1.Measurement_Metric{{MetricId: "b", Value: 5}, {MetricId: "c", Value: 6}}}, nil)
	var ids []string
	var vals []float64
	for _, x := range m.GetMetrics() {
		ids = append(ids, x.GetMetricId())
		vals = append(vals, x.GetValue())
	}
	if strings.Join(ids, ",") != "a,b,c" || vals[0] != 1 || vals[1] != 5 || vals[2] != 6 {
		t.Fatalf("merged = %v %v, want a=1 b=5 c=6", ids, vals)
	}
}

// TestTrialWaitsForEveryNodesLastMetrics: a job's end read before the rest
// of its metrics (a tester killed Loom during a study; the restarted
// service read the job's end, then the step topic's backlog) does not
// judge the trial on the points read so far: it stays ACTIVE until its
// node's step end, which the agent sends after the step's last metrics on
// the same topic, and its final measurement is the last step's. Before,
// trial 11 ended SUCCEEDED at step 303 of 1500, its later points dropped.
func TestTrialWaitsForEveryNodesLastMetrics(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_RUNNING))
	metrics := func(from, to int64) *eventsv1.MetricsReported {
		m := &eventsv1.MetricsReported{Job: n.Job(), Attempt: 1, Node: "n-0001"}
		for st := from; st <= to; st++ {
			m.Points = append(m.Points, &eventsv1.MetricsReported_Point{Step: st, Values: map[string]float64{"val_loss": 10 - float64(st)}})
		}
		return m
	}
	handle(t, s, t0.Add(time.Second), Input{Payload: metrics(1, 3)})
	handle(t, s, t0.Add(2*time.Second), Input{Payload: jobIs(n.Job(), loomv1.JobState_COMPLETED)})
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_ACTIVE {
		t.Fatalf("judged before its node's last metrics were read: %v", got)
	}
	handle(t, s, t0.Add(3*time.Second), Input{Payload: metrics(4, 9)})
	// Another node's step end, or one of another run, is not this run's.
	handle(t, s, t0.Add(3*time.Second), Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: 1, Node: "n-0002", State: eventsv1.StepState_STEP_EXITED}})
	handle(t, s, t0.Add(3*time.Second), Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: 2, Node: "n-0001", State: eventsv1.StepState_STEP_EXITED}})
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_ACTIVE {
		t.Fatalf("judged on another node's or run's step end: %v", got)
	}
	handle(t, s, t0.Add(4*time.Second), Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: 1, Node: "n-0001", State: eventsv1.StepState_STEP_EXITED}})
	got := tuningOf(t, s, tunName).GetTrials()[0]
	if got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetFinalMeasurement().GetStepCount() != 9 ||
		got.GetFinalMeasurement().GetMetrics()[0].GetValue() != 1 || len(got.GetMeasurements()) != 9 {
		t.Fatalf("trial after its node's step end: %v", got)
	}
}

// TestTrialWithoutStepEndIsJudgedAfterTheGrace: a step end that never
// comes (an older agent, a lost record) holds a trial whose metrics came
// only until the grace from its job's end is over.
func TestTrialWithoutStepEndIsJudgedAfterTheGrace(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(n.Job(), loomv1.JobState_RUNNING))
	handle(t, s, t0, Input{Payload: &eventsv1.MetricsReported{Job: n.Job(), Attempt: 1, Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{
		{Step: 4, Values: map[string]float64{"val_loss": 0.5}}}}})
	handle(t, s, t0, Input{Payload: jobIs(n.Job(), loomv1.JobState_COMPLETED)})
	if cs := s.Tick(t0.Add(DefaultMetricGrace - time.Second)); len(cs) != 0 {
		t.Fatalf("judged before the grace was over: %v", cs)
	}
	for _, c := range s.Tick(t0.Add(DefaultMetricGrace)) {
		s.Apply(c)
	}
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetFinalMeasurement().GetStepCount() != 4 {
		t.Fatalf("trial after the grace: %v", got)
	}
}

// TestStepEndBeforeItsRunIsKept: a node's step end read before the job's
// event that names the run (its attempt and nodes) is kept, and counts once
// that event comes: a job whose one pass took it from PENDING to COMPLETED,
// or a requeued attempt whose end overtook its RUNNING, has its trial
// judged at its job's end, not after the metric grace. A kept end of a node
// that is not the run's counts for nothing, and what is kept is bounded.
func TestStepEndBeforeItsRunIsKept(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	tr := tuningOf(t, s, tunName).GetTrials()[0]
	n, err := ParseName(tr.GetCustomJob(), CustomJobs)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	ended := func(attempt int32, node string) Input {
		return Input{Payload: &eventsv1.StepChanged{Job: n.Job(), Attempt: attempt, Node: node, State: eventsv1.StepState_STEP_EXITED},
			Signer: "nodes/" + node}
	}
	metrics := func(attempt int32, step int64) Input {
		return Input{Payload: &eventsv1.MetricsReported{Job: n.Job(), Attempt: attempt, Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{
			{Step: step, Values: map[string]float64{"val_loss": 1 / float64(step)}}}}}
	}
	// Attempt 1 runs, then is requeued; attempt 2's step ends (after its
	// last metrics) before its RUNNING is read, with another node's end
	// and a flood of ends of nodes that are not the run's.
	handle(t, s, t0, Input{Payload: jobIs(n.Job(), loomv1.JobState_RUNNING)})
	handle(t, s, t0, metrics(1, 1))
	handle(t, s, t0, metrics(2, 2))
	handle(t, s, t0, ended(2, "n-0001"))
	handle(t, s, t0, ended(2, "n-0009"))
	for i := range 3 * MaxPendingStepEnds {
		handle(t, s, t0, ended(2+int32(i%2), fmt.Sprintf("x-%04d", i)))
	}
	if p := s.Lookup(tunName).cj(tr.GetCustomJob()).PendingStepEnds; len(p) > MaxHeldStepEnds {
		t.Fatalf("%d step ends kept, bound %d", len(p), MaxHeldStepEnds)
	}
	done := jobIs(n.Job(), loomv1.JobState_COMPLETED)
	done.Attempt = 2
	handle(t, s, t0.Add(time.Second), Input{Payload: done})
	got := tuningOf(t, s, tunName).GetTrials()[0]
	if got.GetState() != trainingv1.Trial_SUCCEEDED || got.GetFinalMeasurement().GetStepCount() != 2 {
		t.Fatalf("trial at its job's end, its node's step end read before the run: %v", got)
	}
	if p := s.Lookup(tunName).cj(tr.GetCustomJob()).PendingStepEnds; len(p) != 0 {
		t.Errorf("step ends still kept after the job ended: %v", p)
	}

	// A kept end of a node that is not the run's does not end it.
	s = NewState()
	feed(t, s, tuningJob(tunName, 2, 1, 0))
	feed(t, s, clusterIs(n.EphemeralCluster(), loomv1.Cluster_RUNNING))
	handle(t, s, t0, metrics(1, 1))
	handle(t, s, t0, ended(1, "n-0009"))
	handle(t, s, t0.Add(time.Second), Input{Payload: jobIs(n.Job(), loomv1.JobState_COMPLETED)})
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_ACTIVE {
		t.Fatalf("judged on the step end of a node not the run's: %v", got)
	}
}

// TestHeldStepEndsOfTheRunWinOverStrangers: nodes that are not the run's
// (one sending ends of attempts to come, then as many others as the hold
// has room for, less one) fill the step ends held before the run's event;
// the run's node's end, read after them, is still held and ends the
// trial at its job's end rather than after the metric grace.
func TestHeldStepEndsOfTheRunWinOverStrangers(t *testing.T) {
	t.Parallel()
	s := NewState()
	job, metrics, ended := heldTrial(t, s)
	handle(t, s, t0, metrics(1, "n-0001", 1))
	for a := range 2 * MaxHeldStepEnds {
		handle(t, s, t0, ended(int32(2+a), "x-flood"))
	}
	for i := range MaxHeldStepEnds - 2 {
		handle(t, s, t0, ended(1, fmt.Sprintf("x-%04d", i)))
	}
	handle(t, s, t0, ended(1, "n-0001"))
	held := s.Lookup(tunName).cj(tuningOf(t, s, tunName).GetTrials()[0].GetCustomJob()).PendingStepEnds
	ours := slices.ContainsFunc(held, func(e StepEnd) bool { return e.Attempt == 1 && strings.HasSuffix(e.Node, "/nodes/n-0001") })
	if len(held) > MaxHeldStepEnds || !ours {
		t.Fatalf("%d step ends held (bound %d), the run's node's among them: %v", len(held), MaxHeldStepEnds, ours)
	}
	handle(t, s, t0.Add(time.Second), Input{Payload: jobIs(job, loomv1.JobState_COMPLETED)})
	if got := tuningOf(t, s, tunName).GetTrials()[0]; got.GetState() != trainingv1.Trial_SUCCEEDED {
		t.Fatalf("trial at its job's end, its node's step end held behind strangers': %v", got)
	}
}
