package domain

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// prune runs retention as the app does (compute, then commit) and checks
// the invariants.
func (h *harness) prune(ret Retention) *Pruned {
	h.t.Helper()
	p := h.s.Prune(h.now, ret, 0)
	h.s.CommitPrune(p)
	checkAllocIndex(h.t, h.s)
	checkInvariants(h.t, h.s)
	return p
}

func usageSnapshot(s *State) map[string]Usage {
	out := map[string]Usage{}
	for k, u := range s.usage {
		out[k] = *u
	}
	return out
}

// TestRetentionPrunesEndedJobs: ended jobs go after MinJobAge, not before,
// and not while a step of theirs still ends; dependencies on pruned jobs
// resolve on their final state; array limits and fair-share usage do not
// change; compact records go after EndedAge.
func TestRetentionPrunesEndedJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 8)
	h.node("gpu-0002", 8)
	ret := Retention{MinJobAge: 5 * time.Minute, EndedAge: time.Hour}

	h.submitJob(job(1, 1, 0, func(j *loomv1.Job) { j.User, j.Account = "ana", "a" }))
	h.submitJob(job(2, 1, 0, func(j *loomv1.Job) { j.User, j.Account = "ana", "a" }))
	h.submitJob(job(3, 2, 0)) // ends with a step still stopping: COMPLETING
	h.finish(1, 0)
	h.finish(2, 1)
	h.step(3, 1, "gpu-0001", eventsv1.StepState_STEP_EXITED, 9)
	h.wantExact(1, loomv1.JobState_COMPLETED, "")
	h.wantExact(2, loomv1.JobState_FAILED, ReasonNonZeroExitCode)
	h.wantExact(3, loomv1.JobState_COMPLETING, ReasonNonZeroExitCode)
	// An array of 4 tasks, 2 at a time; task 10 ends.
	h.submitJob(job(10, 1, 0, func(j *loomv1.Job) { j.Array = "0-3%2" }))
	h.finish(10, 0)
	h.wantExact(12, loomv1.JobState_RUNNING, "")
	h.wantState(13, loomv1.JobState_PENDING, ReasonJobArrayTaskLimit)

	if p := h.prune(ret); !p.Empty() {
		t.Fatalf("pruned before MinJobAge: %+v", p)
	}
	h.tick(6 * time.Minute)
	usage := usageSnapshot(h.s)
	p := h.prune(ret)
	if !reflect.DeepEqual(p.Jobs, []string{jobName(1), jobName(10), jobName(2)}) ||
		!reflect.DeepEqual(p.Runs, []string{RunKey(jobName(1), 1), RunKey(jobName(10), 1), RunKey(jobName(2), 1)}) || len(p.Arrays) != 0 {
		t.Fatalf("pruned %+v; want jobs 1, 10 and 2 with their runs, not job 3 (completing) nor the array (tasks left)", p)
	}
	for _, id := range []int{1, 2, 10} {
		if h.s.JobRecord(jobName(id)) != nil || h.s.Run(jobName(id), 1) != nil {
			t.Fatalf("job %d still in the state", id)
		}
	}
	if e := h.s.EndedRecord(jobName(2)); e == nil || e.State != loomv1.JobState_FAILED || e.Start.IsZero() || e.End.IsZero() {
		t.Fatalf("compact record of job 2: %+v", e)
	}
	if got := usageSnapshot(h.s); !reflect.DeepEqual(got, usage) {
		t.Fatalf("usage changed by pruning: %v, was %v", got, usage)
	}
	// The array's % limit still counts its running tasks only.
	h.tick(time.Second)
	h.wantState(13, loomv1.JobState_PENDING, ReasonJobArrayTaskLimit)
	h.wantExact(3, loomv1.JobState_COMPLETING, ReasonNonZeroExitCode)

	// Dependencies on pruned jobs, submitted after the pruning.
	deps := map[int]string{20: "afterok:1", 21: "afternotok:1", 22: "afternotok:2", 23: "afterok:2", 24: "afterany:1:2", 25: "afterok:10_0"}
	for id := 20; id <= 25; id++ {
		h.submitJob(job(id, 1, 0, func(j *loomv1.Job) { j.Dependency = deps[id]; j.Hold = true }))
	}
	h.tick(time.Second)
	for id, want := range map[int]string{20: ReasonHeldUser, 21: ReasonDependencyNeverSatisfied, 22: ReasonHeldUser,
		23: ReasonDependencyNeverSatisfied, 24: ReasonHeldUser, 25: ReasonHeldUser} {
		j := h.job(id)
		// Held jobs show their dependency reason only when it is never
		// satisfied; release the others to see them start.
		if want == ReasonHeldUser {
			h.do(&eventsv1.UpdateJob{Job: jobName(id), Cluster: cl, Action: ActionRelease})
			if st := h.job(id).GetState(); st != loomv1.JobState_RUNNING && h.job(id).GetStateReason() != ReasonResources &&
				h.job(id).GetStateReason() != ReasonPriority {
				t.Errorf("job %d (%s) after release: %v %q; want it to start or wait for resources", id, deps[id], st, h.job(id).GetStateReason())
			}
			continue
		}
		h.do(&eventsv1.UpdateJob{Job: jobName(id), Cluster: cl, Action: ActionRelease})
		if j = h.job(id); j.GetState() != loomv1.JobState_PENDING || j.GetStateReason() != want {
			t.Errorf("job %d (%s): %v %q, want PENDING %q", id, deps[id], j.GetState(), j.GetStateReason(), want)
		}
	}
	// A copy of a pruned job's submit does not bring it back.
	h.submitJob(job(1, 1, 0))
	if h.s.JobRecord(jobName(1)) != nil {
		t.Fatal("a redelivered submit resurrected a pruned job")
	}

	// The compact records go after EndedAge; the array when none of its tasks is left.
	for _, id := range []int{11, 12, 13} {
		for h.job(id).GetState() == loomv1.JobState_PENDING {
			h.tick(time.Second)
		}
		h.finish(id, 0)
	}
	h.tick(2 * time.Hour)
	p = h.prune(ret)
	if h.s.EndedRecord(jobName(1)) != nil || h.s.EndedRecord(jobName(10)) != nil {
		t.Fatalf("compact records kept past EndedAge: %+v", p)
	}
	if h.s.ArrayRecord(jobName(10)) == nil {
		t.Fatal("the array went while compact records of its tasks are left")
	}
	h.tick(2 * time.Hour)
	p = h.prune(ret)
	if h.s.ArrayRecord(jobName(10)) != nil || !reflect.DeepEqual(p.Arrays, []string{jobName(10)}) {
		t.Fatalf("the array outlived its tasks: %+v", p)
	}
	for id := 11; id <= 13; id++ {
		if h.s.EndedRecord(jobName(id)) != nil {
			t.Fatalf("task %s: compact record kept", strconv.Itoa(id))
		}
	}
}
