package domain

import (
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestKeptHoldingsFollowTheRuns checks the reservation of passes that read
// the nodes' holdings kept from the last pass (keptHoldings), each against
// the same pass on a restored state: a lower time limit of a running job
// (its run's mirrored limit changes in place), a run that starts or ends
// (another list of the node's runs) and the clock passing the runs' ends
// move it as they move the restored state's.
func TestKeptHoldingsFollowTheRuns(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{Policy: EASYPolicy()})
	h.gpuNode("a3-0001", "b1")
	h.gpuNode("a3-0002", "b1")
	h.submitJob(job(1, 1, 4, limit(time.Hour)))   // a3-0001
	h.submitJob(job(2, 1, 8, limit(3*time.Hour))) // a3-0002
	h.submitJob(job(3, 2, 8, limit(time.Hour)))
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	start := h.job(2).GetStartTime().AsTime()
	// pass checks a pass at now+d on the state, which reads kept holdings
	// after the first, against the same pass on a restored state.
	pass := func(label string, d time.Duration, want time.Time) {
		t.Helper()
		at := h.now.Add(d)
		got := h.s.Schedule(at)
		fresh := NewState(h.s.Config())
		fresh.Restore(h.s.Snapshot())
		sameChange(t, label, got, fresh.Schedule(at))
		if len(got.Reservations) != 1 || !got.Reservations[0].Start.Equal(want) {
			t.Fatalf("%s: reservation %+v, want one at %v", label, got.Reservations, want)
		}
	}
	pass("first", time.Second, start.Add(3*time.Hour))
	pass("kept", 2*time.Second, start.Add(3*time.Hour))
	// Job 2's limit lowered: its run's mirrored limit changes in place.
	h.do(&eventsv1.UpdateJob{Job: jobName(2), Cluster: cl, Action: ActionUpdate, TimeLimitSeconds: 5400})
	pass("lower limit", time.Second, start.Add(90*time.Minute))
	pass("lower limit, kept", 2*time.Second, start.Add(90*time.Minute))
	// Job 4 backfilled beside job 1: another list of a3-0001's runs.
	h.submitJob(job(4, 1, 4, limit(30*time.Minute)))
	h.wantState(4, loomv1.JobState_RUNNING, "")
	pass("job 4 started", time.Second, start.Add(90*time.Minute))
	pass("job 4 started, kept", 2*time.Second, start.Add(90*time.Minute))
	// Past both ends (the clock gives up on neither yet): now.
	pass("past the ends", 4*time.Hour, h.now.Add(4*time.Hour))
	// Job 1 ends: a3-0001 is free, the reservation waits for job 2 alone.
	h.finish(1, 0)
	pass("job 1 ended", time.Second, start.Add(90*time.Minute))
}

// TestKeptAllocationsFollowTheRuns: a pass reads the nodes' allocations
// from a copy kept across passes (staticCache.allocValsOf); it follows the
// state when a run starts or ends on a node that already had an entry (the
// entry changes in place) as when one is added or removed, each pass as a
// pass on the state restored afresh decides.
func TestKeptAllocationsFollowTheRuns(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{Policy: EASYPolicy()})
	h.gpuNode("a3-0001", "b1")
	pass := func(label string) {
		t.Helper()
		for _, d := range []time.Duration{time.Second, 2 * time.Second} { // the second on the kept copy
			at := h.now.Add(d)
			got := h.s.Schedule(at)
			fresh := NewState(h.s.Config())
			fresh.Restore(h.s.Snapshot())
			sameChange(t, label, got, fresh.Schedule(at))
		}
	}
	h.submitJob(job(1, 1, 4, limit(time.Hour))) // the node's entry added
	h.wantState(1, loomv1.JobState_RUNNING, "")
	h.submitJob(job(9, 1, 8, limit(time.Hour))) // keeps the queue from emptying
	pass("one run")
	h.submitJob(job(2, 1, 4, limit(time.Hour))) // the entry changed in place
	h.wantState(2, loomv1.JobState_RUNNING, "")
	pass("two runs")
	h.submitJob(job(3, 1, 4, limit(time.Hour))) // no room left
	h.wantState(3, loomv1.JobState_PENDING, ReasonResources)
	pass("full")
	h.finish(1, 0) // the entry changed in place: room for job 3
	h.wantState(3, loomv1.JobState_RUNNING, "")
	pass("job 1 ended")
	h.finish(2, 0)
	h.finish(3, 0) // the entry removed: room for job 9
	h.wantState(9, loomv1.JobState_RUNNING, "")
}
