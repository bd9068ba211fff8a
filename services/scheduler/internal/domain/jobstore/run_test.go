package jobstore

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestRunRecordMethods covers the pure methods over a run's persisted part.
func TestRunRecordMethods(t *testing.T) {
	t.Parallel()
	r := &RunRecord{Job: "projects/p/jobs/7", Attempt: 12, Steps: map[string]Step{
		"a": {State: eventsv1.StepState_STEP_RUNNING},
		"b": {Abandoned: true},
	}}
	if got := r.Key(); got != "projects/p/jobs/7#12" || got != RunKey(r.Job, r.Attempt) {
		t.Fatalf("Key() = %q", got)
	}
	if !r.Holds("a") || r.Holds("b") || r.Holds("c") {
		t.Fatal("Holds: want a only (b abandoned, c not in the run)")
	}
	if r.Ended() {
		t.Fatal("a run without End has not ended")
	}
	r.End = time.Unix(1, 0)
	r.Released = true
	if !r.Ended() || r.Holds("a") {
		t.Fatal("ended and released: holds nothing")
	}
	for _, c := range []struct {
		s    Step
		want bool
	}{
		{Step{State: eventsv1.StepState_STEP_RUNNING}, false},
		{Step{}, false},
		{Step{Idle: true}, true},
		{Step{Abandoned: true, State: eventsv1.StepState_STEP_RUNNING}, true},
		{Step{State: eventsv1.StepState_STEP_EXITED}, true},
		{Step{State: eventsv1.StepState_STEP_LOST}, true},
	} {
		if c.s.Terminal() != c.want {
			t.Errorf("%+v.Terminal() = %v", c.s, !c.want)
		}
	}
}

// TestJobStepClone: Ranks follow the step's distribution (block without
// one, as for steps recorded before it was kept), and a clone's parts and
// exit codes are its own (the domain's copy-on-write relies on it).
func TestJobStepClone(t *testing.T) {
	t.Parallel()
	s := &JobStep{Tasks: []int32{2, 3, 1}, Parts: []StepPart{{}, {State: eventsv1.StepState_STEP_KILLED}},
		ExitCodes: []int32{0, 0}, State: loomv1.JobState_RUNNING}
	if r := s.Ranks(); !reflect.DeepEqual(r, [][]int32{{0, 1}, {2, 3, 4}, {5}}) {
		t.Fatalf("block Ranks: %v", r)
	}
	cyc := &JobStep{Tasks: []int32{2, 3, 1}, Distribution: "cyclic"}
	if r := cyc.Ranks(); !reflect.DeepEqual(r, [][]int32{{0, 3}, {1, 4, 5}, {2}}) {
		t.Fatalf("cyclic Ranks: %v", r)
	}
	if s.Parts[0].Terminal() || !s.Parts[1].Terminal() || s.Ended() {
		t.Fatal("part/step ends")
	}
	c := s.Clone()
	c.Parts[0].Message, c.ExitCodes[0] = "x", 9
	if s.Parts[0].Message != "" || s.ExitCodes[0] != 0 {
		t.Fatal("Clone shares parts or exit codes with the original")
	}
}

// TestResilienceFieldsRoundTrip: what the job's side of hardware resilience
// keeps (a job's infrastructure restarts and requeues of runs never launched, a run's progress, fences and
// checkpoint drain) survives the store's encoding.
func TestResilienceFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := EncodeJob(&JobRecord{Job: &loomv1.Job{Name: "projects/p/jobs/1", UserFailures: 2, MaxRetries: 3}, InfraRestarts: 4,
		UnlaunchedRequeues: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := DecodeJob(b)
	if err != nil || j.InfraRestarts != 4 || j.UnlaunchedRequeues != 3 || j.Job.GetUserFailures() != 2 || j.Job.GetMaxRetries() != 3 {
		t.Fatalf("job: %+v %v", j, err)
	}
	r := RunRecord{Job: "projects/p/jobs/1", Attempt: 1, Steps: map[string]Step{"n": {FenceUntil: at}}, FenceUntil: at,
		Progress: Progress{Step: 9, CheckpointStep: 8, CheckpointTime: at, Last: at}, CheckpointBy: at, CheckpointFrom: 7,
		CheckpointNode: "n", CheckpointReason: "x"}
	rb, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var back RunRecord
	if err := json.Unmarshal(rb, &back); err != nil || !reflect.DeepEqual(back, r) || !back.Steps["n"].Fenced() {
		t.Fatalf("run: %+v %v", back, err)
	}
}
