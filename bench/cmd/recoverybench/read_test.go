package main

import (
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestStepsRunning: "running again" is the next run's program running on
// both nodes, as their agents report it, not the job's RUNNING (which the
// scheduler sets at the placement, before any node has started it): the
// last node's first STEP_RUNNING of that attempt, nothing until both have.
func TestStepsRunning(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	step := func(ms int, node string, attempt int32, st eventsv1.StepState) envelope.Event {
		return envelope.Event{Time: at(ms), Payload: &eventsv1.StepChanged{Job: "j", Attempt: attempt, Node: node, State: st}}
	}
	evs := []envelope.Event{
		{Time: at(1), Payload: &eventsv1.JobChanged{Job: &loomv1.Job{Name: "j", State: loomv1.JobState_RUNNING}, Attempt: 2}},
		step(2, "a", 1, eventsv1.StepState_STEP_RUNNING), // the run the fault ended
		step(3, "b", 1, eventsv1.StepState_STEP_RUNNING),
		step(5, "a", 2, eventsv1.StepState_STEP_RUNNING),
		step(6, "a", 2, eventsv1.StepState_STEP_RUNNING), // a repeated report
		{Time: at(7), Payload: &eventsv1.StepChanged{Job: "other", Attempt: 2, Node: "c", State: eventsv1.StepState_STEP_RUNNING}},
	}
	if got := stepsRunning(evs, "j", 2, 2); !got.IsZero() {
		t.Fatalf("one node of two reported: %v, want none yet", got)
	}
	evs = append(evs, step(9, "c", 2, eventsv1.StepState_STEP_EXITED), step(12, "c", 2, eventsv1.StepState_STEP_RUNNING))
	if got := stepsRunning(evs, "j", 2, 2); !got.Equal(at(12)) {
		t.Fatalf("both reported: %v, want the second node's report at %v", got, at(12))
	}
	if got := stepsRunning(evs, "j", 1, 2); !got.Equal(at(3)) {
		t.Fatalf("attempt 1: %v, want %v", got, at(3))
	}
}
