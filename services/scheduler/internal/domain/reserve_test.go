package domain

import (
	"slices"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
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

// TestOverRunIsTheChangesVersion: the change's version of a state's run as
// overRun answers it (a map by run, kept in step with the change) is what
// the change's runs by key say, for every run, as the txn edits runs,
// starts one, and when a version enters the change other than through
// putRunVersion (the map is then made again).
func TestOverRunIsTheChangesVersion(t *testing.T) {
	t.Parallel()
	h := newSpecHarness(t, Config{Policy: EASYPolicy()})
	for _, host := range []string{"a3-0001", "a3-0002", "a3-0003"} {
		h.gpuNode(host, "b1")
	}
	for id := 1; id <= 3; id++ {
		h.submitJob(job(id, 1, 4, limit(time.Hour)))
		h.wantState(id, loomv1.JobState_RUNNING, "")
	}
	tx := writerTxn(h.s, h.now)
	var keys []string
	for key := range h.s.runs {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	check := func(label string) {
		t.Helper()
		for _, key := range keys {
			r := h.s.runs[key]
			want := r
			if nr, ok := tx.c.Runs[key]; ok && nr != nil {
				want = nr
			}
			if got := tx.overRun(r); got != want {
				t.Fatalf("%s: run %s: overRun %p, the change's %p (state's %p)", label, key, got, want, r)
			}
		}
	}
	check("no version")
	tx.editRun(keys[0]).PreemptBy = jobName(9)
	check("one edited") // the map made here
	tx.editRun(keys[1]).PreemptBy = jobName(9)
	check("two edited") // kept in step
	tx.putRunVersion("projects/default/jobs/8#1", &Run{RunRecord: jobstore.RunRecord{Job: jobName(8), Attempt: 1}})
	check("one started")
	c := h.s.runs[keys[2]].clone()
	tx.c.Runs[keys[2]] = c // not through putRunVersion
	check("one put aside")
	if tx.overRun(h.s.runs[keys[2]]) != c {
		t.Fatal("a version put aside from putRunVersion is not found")
	}
}
