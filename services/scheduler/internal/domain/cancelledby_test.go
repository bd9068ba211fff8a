package domain

import (
	"testing"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestCancelRecordsWhoAndBatchEnd: a cancel applied records who asked
// (the command's user, as the gateway authenticated them) on the job,
// pending or running, and the job's final JobChanged — what the
// accounting history keeps — carries it with the batch script's own end
// as its agent reported it (killed by 15) beside the run's exit code 0,
// as Slurm's sacct shows "CANCELLED by UID" and the .batch row 0:15. An
// allocation ended with its command's exit code is no cancel: nobody is
// recorded.
func TestCancelRecordsWhoAndBatchEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 4)
	h.submit(1, 1, 4)
	h.submit(2, 1, 4) // waits behind job 1
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)

	h.do(&eventsv1.CancelJob{Job: jobName(2), Cluster: cl, User: "bo"})
	if j := h.job(2); j.GetState() != loomv1.JobState_CANCELLED || j.GetCancelledBy() != "bo" {
		t.Fatalf("pending job 2 after bo's cancel: %v by %q, want CANCELLED by bo", j.GetState(), j.GetCancelledBy())
	}

	h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, User: "ana"})
	if j := h.job(1); j.GetCancelledBy() != "ana" {
		t.Fatalf("running job 1 after ana's cancel: cancelled by %q, want ana", j.GetCancelledBy())
	}
	c := h.do(&eventsv1.StepChanged{Job: jobName(1), Attempt: 1, Node: nodeName("gpu-0001"), Cluster: cl,
		State: eventsv1.StepState_STEP_KILLED, ExitCode: 143, ExitSignal: proto.Int32(15)})
	var final *loomv1.Job
	for _, jc := range jobChanges(c) {
		if jc.GetJob().GetName() == jobName(1) && jc.GetJob().GetState() == loomv1.JobState_CANCELLED {
			final = jc.GetJob()
		}
	}
	if final == nil {
		t.Fatalf("no final JobChanged for job 1 when its step ended: %v", jobChanges(c))
	}
	runs := final.GetRuns()
	if final.GetCancelledBy() != "ana" || len(runs) != 1 || runs[0].GetExitCode() != 0 ||
		runs[0].BatchExitCode == nil || runs[0].GetBatchExitCode() != 143 || runs[0].BatchExitSignal == nil || runs[0].GetBatchExitSignal() != 15 {
		t.Fatalf("final job 1: cancelled by %q, runs %v; want ana, one run with exit code 0 and its batch script's end 143, signal 15",
			final.GetCancelledBy(), runs)
	}

	// Job 3 runs as an allocation that its command ends (srun, salloc).
	h.submit(3, 1, 4)
	h.step(3, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	h.do(&eventsv1.CancelJob{Job: jobName(3), Cluster: cl, User: "ana", ExitCode: proto.Int32(0)})
	if j := h.job(3); j.GetCancelledBy() != "" {
		t.Errorf("allocation 3 ended by its command: cancelled by %q, want nobody", j.GetCancelledBy())
	}
}

// TestSubmitIgnoresCallerCancelledBy: who cancelled a job, and how its
// program ended, are the scheduler's record, never the submitter's: a
// SubmitJob that sets them (any REST or gRPC caller, or the bridge, may
// send any Job) is taken without them, so that a job ended otherwise (an
// allocation ended by its command, here) is never shown "CANCELLED by
// root" or killed by a signal it never got.
func TestSubmitIgnoresCallerCancelledBy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.node("gpu-0001", 4)
	h.submitJob(&loomv1.Job{Name: jobName(1), JobId: "1", Cluster: cl, NodeCount: 1, GpusPerNode: 4,
		Command: []string{"/bin/train"}, CancelledBy: "root", ExitSignal: proto.Int32(9),
		DerivedExitCode: proto.Int32(3), DerivedExitSignal: proto.Int32(9)})
	check := func(when string) {
		t.Helper()
		j := h.job(1)
		if j.GetCancelledBy() != "" || j.ExitSignal != nil || j.DerivedExitCode != nil || j.DerivedExitSignal != nil {
			t.Fatalf("job 1 %s: cancelled by %q, exit signal %v, derived exit %v/%v: the submitter's, want none",
				when, j.GetCancelledBy(), j.ExitSignal, j.DerivedExitCode, j.DerivedExitSignal)
		}
	}
	check("pending")
	h.step(1, 1, "gpu-0001", eventsv1.StepState_STEP_RUNNING, 0)
	h.do(&eventsv1.CancelJob{Job: jobName(1), Cluster: cl, User: "ana", ExitCode: proto.Int32(0)})
	if j := h.job(1); j.GetState() == loomv1.JobState_CANCELLED || j.GetCancelledBy() != "" {
		t.Fatalf("allocation 1 ended by its command: %v, cancelled by %q; want not cancelled, by nobody", j.GetState(), j.GetCancelledBy())
	}
}
