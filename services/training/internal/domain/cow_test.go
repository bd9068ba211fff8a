package domain

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// A change works on a copy of its root that shares the root's trials and
// their CustomJobs until it edits them (Root.derive, Root.edit). step and
// tick check every decision the tests make against what a deep copy of the
// roots says, so that a mutation that bypasses edit fails the test that
// makes it.

// snapshot returns a deep copy of every root of s, by name.
func snapshot(s *State) map[string]*Root {
	out := make(map[string]*Root, len(s.Roots))
	for name, r := range s.Roots {
		out[name] = r.Clone()
	}
	return out
}

// checkDecision fails t when deciding c changed a root of s (snap: its
// roots before), or when c is not what comparing whole roots gives.
func checkDecision(t *testing.T, s *State, snap map[string]*Root, c *Change) {
	t.Helper()
	if len(s.Roots) != len(snap) {
		t.Fatalf("deciding changed the state's roots: %d, were %d", len(s.Roots), len(snap))
	}
	for name, want := range snap {
		if got := s.Roots[name]; got == nil || !rootEqual(want, got) {
			t.Fatalf("deciding changed the stored root %s: a change leaked into the root it was made from", name)
		}
	}
	if c != nil && c.After != nil {
		checkTrials(t, c)
		checkEvents(t, snap[c.Root], c)
	}
}

// checkTrials fails t when c.After holds a trial, or a trial's CustomJob,
// that c.Trials does not name and that is not c.Before's very object:
// storage and Apply look at no other than c.Trials'.
func checkTrials(t *testing.T, c *Change) {
	t.Helper()
	if c.Trials == nil {
		if c.Before != nil {
			t.Fatalf("a change of %s does not say which trials it changed", c.Root)
		}
		return
	}
	if !slices.IsSortedFunc(c.Trials, compareTrialIDs) {
		t.Fatalf("Trials %v are not in id order", c.Trials)
	}
	trials, cjs := map[string]*trainingv1.Trial{}, map[string]*CJ{}
	if c.Before.Tuning != nil {
		for _, tr := range c.Before.Tuning.Job.GetTrials() {
			trials[tr.GetId()] = tr
		}
	}
	for _, j := range c.Before.CJs {
		cjs[j.TrialID] = j
	}
	if c.After.Tuning != nil {
		for _, tr := range c.After.Tuning.Job.GetTrials() {
			if !slices.Contains(c.Trials, tr.GetId()) && trials[tr.GetId()] != tr {
				t.Fatalf("trial %s is not Before's, and not in Trials %v", tr.GetId(), c.Trials)
			}
		}
	}
	for _, j := range c.After.CJs {
		if j.TrialID != "" && !slices.Contains(c.Trials, j.TrialID) && cjs[j.TrialID] != j {
			t.Fatalf("trial %s's custom job is not Before's, and not in Trials %v", j.TrialID, c.Trials)
		}
	}
}

// checkEvents fails t when c's Changed events are not those comparing the
// whole roots gives (before: a deep copy of c.Before, nil when new): a
// CustomJobChanged for each CustomJob and a TrialChanged for each trial
// that changed, the tuning job's and the pipeline's when they changed
// (the tuning job's without measurements), update times aside.
func checkEvents(t *testing.T, before *Root, c *Change) {
	t.Helper()
	var want, got []string
	for _, j := range c.After.CJs {
		var prev *trainingv1.CustomJob
		if before != nil && before.cj(j.Job.GetName()) != nil {
			prev = before.cj(j.Job.GetName()).Job
		}
		if changed(prev, j.Job, func(m *trainingv1.CustomJob) **timestamppb.Timestamp { return &m.UpdateTime }) {
			want = append(want, "custom job "+j.Job.GetName())
		}
	}
	summary := func(j *trainingv1.HyperparameterTuningJob) *trainingv1.HyperparameterTuningJob {
		c := proto.Clone(j).(*trainingv1.HyperparameterTuningJob)
		for _, tr := range c.GetTrials() {
			tr.Measurements = nil
		}
		return c
	}
	if tu := c.After.Tuning; tu != nil {
		var prev *trainingv1.HyperparameterTuningJob
		prevTrials := map[string]*trainingv1.Trial{}
		if before != nil && before.Tuning != nil {
			prev = before.Tuning.Job
			for _, tr := range prev.GetTrials() {
				prevTrials[tr.GetId()] = tr
			}
		}
		for _, tr := range tu.Job.GetTrials() {
			if !proto.Equal(prevTrials[tr.GetId()], tr) {
				want = append(want, "trial "+tr.GetId())
			}
		}
		var prevSum *trainingv1.HyperparameterTuningJob
		if prev != nil {
			prevSum = summary(prev)
		}
		if changed(prevSum, summary(tu.Job), func(m *trainingv1.HyperparameterTuningJob) **timestamppb.Timestamp { return &m.UpdateTime }) {
			want = append(want, "tuning job")
		}
	}
	if p := c.After.Pipeline; p != nil {
		var prev *trainingv1.TrainingPipeline
		if before != nil && before.Pipeline != nil {
			prev = before.Pipeline.P
		}
		if changed(prev, p.P, func(m *trainingv1.TrainingPipeline) **timestamppb.Timestamp { return &m.UpdateTime }) {
			want = append(want, "pipeline")
		}
	}
	for _, e := range c.Emits {
		switch p := e.Payload.(type) {
		case *eventsv1.CustomJobChanged:
			got = append(got, "custom job "+p.GetCustomJob().GetName())
		case *eventsv1.TrialChanged:
			got = append(got, "trial "+p.GetTrial().GetId())
		case *eventsv1.HyperparameterTuningJobChanged:
			got = append(got, "tuning job")
			if !proto.Equal(p.GetTuningJob(), summary(c.After.Tuning.Job)) {
				t.Fatalf("the tuning job's event is not its summary: %v", p.GetTuningJob())
			}
		case *eventsv1.TrainingPipelineChanged:
			got = append(got, "pipeline")
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("a change of %s emitted the changes of %q; comparing whole roots gives %q", c.Root, got, want)
	}
}

// checkIndex fails t when s's index is not the one NewState builds from
// its roots.
func checkIndex(t *testing.T, s *State) {
	t.Helper()
	if want := NewState(slices.Collect(maps.Values(s.Roots))...); !maps.Equal(s.index, want.index) {
		t.Fatalf("the index after Apply is not the one the roots give:\n%v\nwant\n%v", s.index, want.index)
	}
}

// tick runs s.Tick at now, checked as step checks a decision, and applies
// its changes.
func tick(t *testing.T, s *State, now time.Time) []*Change {
	t.Helper()
	snap := snapshot(s)
	cs := s.Tick(now)
	for _, c := range cs {
		checkDecision(t, s, snap, c)
	}
	for _, c := range cs {
		s.Apply(c)
	}
	checkIndex(t, s)
	return cs
}

// TestChangesLeaveTheirRootAlone drives studies through the events and
// ticks that change trials and their CustomJobs: cluster states, a
// capacity refusal and its retry, metrics (a step reported again too),
// the job's states (a requeue, a failure, an end without metrics judged
// after the grace), a cluster deleted, a cancel of one trial's CustomJob,
// of a study, of a pipeline's study, and FLEX_START expiry. step and tick
// fail when a decision changed the root it was made from, when a change's
// Trials leave out a trial it holds anew, or when its events are not what
// comparing whole roots gives.
func TestChangesLeaveTheirRootAlone(t *testing.T) {
	t.Parallel()
	job := func(id string) string { return "projects/p/jobs/" + id }
	cluster := func(id string) string { return "projects/p/clusters/cj-" + id }
	metrics := func(id string, step int64, loss float64) *eventsv1.MetricsReported {
		return &eventsv1.MetricsReported{Job: job(id), Node: "n-0001", Points: []*eventsv1.MetricsReported_Point{
			{Step: step, Values: map[string]float64{"val_loss": loss, "accuracy": 0.5}}}}
	}
	at := func(s *State, now time.Time, p proto.Message) *Change { return step(t, s, now, Input{Payload: p}) }

	// A study of trials 201..208, three at a time.
	s := NewState()
	feed(t, s, tuningJob(tunName, 8, 3, 0))
	feed(t, s, clusterIs(cluster("201"), loomv1.Cluster_CREATING))
	feed(t, s, &eventsv1.ClusterOperationFailed{Cluster: cluster("202"), Code: codeFailedPrecondition, Message: "no capacity"})
	if cs := tick(t, s, t0.Add(CapacityRetry)); len(cs) != 1 {
		t.Fatalf("capacity retry: %d changes", len(cs))
	}
	feed(t, s, clusterIs(cluster("201"), loomv1.Cluster_RUNNING))
	feed(t, s, clusterIs(cluster("203"), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(job("201"), loomv1.JobState_RUNNING))
	feed(t, s, metrics("201", 1, 3))
	feed(t, s, metrics("201", 2, 2))
	feed(t, s, metrics("201", 2, 1.5)) // step 2 again: replaced
	requeued := jobIs(job("201"), loomv1.JobState_PENDING)
	requeued.Job.RestartCount = 1
	feed(t, s, requeued)
	feed(t, s, jobIs(job("201"), loomv1.JobState_RUNNING))
	feed(t, s, jobIs(job("203"), loomv1.JobState_FAILED))         // trial 3 INFEASIBLE, trial 4 starts
	feed(t, s, &eventsv1.ClusterDeleted{Cluster: cluster("203")}) // nothing changes
	at(s, t0, &eventsv1.CancelTraining{Name: loc + "customJobs/202", User: "alice"})
	feed(t, s, jobIs(job("201"), loomv1.JobState_COMPLETED)) // trial 1 SUCCEEDED
	feed(t, s, clusterIs(cluster("204"), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(job("204"), loomv1.JobState_COMPLETED)) // no metrics: finalizing
	if cs := tick(t, s, t0.Add(DefaultMetricGrace)); len(cs) != 1 {
		t.Fatalf("metric grace: %d changes", len(cs))
	}
	at(s, t0.Add(2*time.Minute), &eventsv1.CancelTraining{Name: tunName, User: "alice"})
	for _, tr := range tuningOf(t, s, tunName).GetTrials() {
		if trialActive(tr) {
			n, _ := ParseName(tr.GetCustomJob(), CustomJobs)
			at(s, t0.Add(3*time.Minute), jobIs(n.Job(), loomv1.JobState_CANCELLED))
		}
	}
	j := tuningOf(t, s, tunName)
	states := map[trainingv1.Trial_State]int{}
	for _, tr := range j.GetTrials() {
		states[tr.GetState()]++
	}
	if j.GetState() != trainingv1.JobState_JOB_STATE_CANCELLED || states[trainingv1.Trial_SUCCEEDED] != 1 || states[trainingv1.Trial_INFEASIBLE] < 3 {
		t.Fatalf("the study ended %v with trials %v", j.GetState(), states)
	}

	// A pipeline's study, cancelled with the pipeline while a trial runs.
	s = NewState()
	task := tuningJob("", 3, 2, 0).GetTuningJob()
	task.Name, task.User, task.DisplayName = "", "", ""
	feed(t, s, pipeline("hyperparameter_tuning_task_1.0.0.yaml", task, 5))
	feed(t, s, clusterIs(cluster("302"), loomv1.Cluster_RUNNING))
	feed(t, s, jobIs(job("302"), loomv1.JobState_RUNNING))
	at(s, t0, &eventsv1.CancelTraining{Name: plName, User: "alice"})
	feed(t, s, jobIs(job("302"), loomv1.JobState_CANCELLED))
	if p := s.Lookup(plName).Pipeline.P; p.GetState() != trainingv1.PipelineState_PIPELINE_STATE_CANCELLED {
		t.Fatalf("the pipeline ended %v", p.GetState())
	}

	// FLEX_START trials that never start expire at a tick.
	s = NewState()
	flex := tuningJob(tunName, 4, 2, 0)
	flex.TuningJob.TrialJobSpec.Scheduling = &trainingv1.Scheduling{Strategy: trainingv1.Scheduling_FLEX_START,
		MaxWaitDuration: durationpb.New(10 * time.Minute)}
	feed(t, s, flex)
	if cs := tick(t, s, t0.Add(10*time.Minute)); len(cs) != 1 {
		t.Fatalf("expiry: %d changes", len(cs))
	}
	if j := tuningOf(t, s, tunName); len(j.GetTrials()) != 4 || j.GetTrials()[0].GetState() != trainingv1.Trial_INFEASIBLE {
		t.Fatalf("after the expiry: %v", j)
	}
}

// TestAChangeCopiesOnlyWhatItEdits: a trial's metrics change copies that
// trial alone; the change names it, holds the study's other trials and
// CustomJobs as the stored root does (the same objects), and the stored
// root keeps the trial as it was.
func TestAChangeCopiesOnlyWhatItEdits(t *testing.T) {
	t.Parallel()
	s := NewState()
	feed(t, s, tuningJob(tunName, 6, 3, 0))
	for _, id := range []string{"201", "202", "203"} {
		feed(t, s, clusterIs("projects/p/clusters/cj-"+id, loomv1.Cluster_RUNNING))
		feed(t, s, jobIs("projects/p/jobs/"+id, loomv1.JobState_RUNNING))
	}
	old := s.Roots[tunName]
	c := step(t, s, t0, Input{Payload: &eventsv1.MetricsReported{Job: "projects/p/jobs/202", Points: []*eventsv1.MetricsReported_Point{
		{Step: 1, Values: map[string]float64{"val_loss": 1}}}}})
	if c == nil || !slices.Equal(c.Trials, []string{"2"}) {
		t.Fatalf("a measurement of trial 2 changed trials %v", c.Trials)
	}
	oldTrials, newTrials := old.Tuning.Job.GetTrials(), c.After.Tuning.Job.GetTrials()
	for i := range oldTrials {
		if same := oldTrials[i] == newTrials[i] && old.CJs[i] == c.After.CJs[i]; same != (i != 1) {
			t.Errorf("trial %d: shared %t, want %t", i+1, same, i != 1)
		}
	}
	if len(oldTrials[1].GetMeasurements()) != 0 || len(newTrials[1].GetMeasurements()) != 1 {
		t.Errorf("trial 2 has %d measurements before, %d after; want 0, 1",
			len(oldTrials[1].GetMeasurements()), len(newTrials[1].GetMeasurements()))
	}
}
