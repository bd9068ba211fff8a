package domain

import (
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"strings"
	"testing"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestFailureSaysWhatHappened: a job whose replica could not start (the
// agent's JobLaunchFailure: nothing ran) is not told to read an output
// that does not exist; a replica that ran and exited is.
func TestFailureSaysWhatHappened(t *testing.T) {
	t.Parallel()
	launch := failure(&loomv1.Job{JobId: "22", State: loomv1.JobState_FAILED, ExitCode: 1,
		StateReason: "JobLaunchFailure on a3-0001: open output /shared/slurm-22.out: permission denied"}, true, "")
	if !strings.HasPrefix(launch, "a replica could not start") || strings.Contains(launch, "loom jobs logs") ||
		!strings.Contains(launch, "permission denied") {
		t.Errorf("a launch failure: %q", launch)
	}
	ran := failure(&loomv1.Job{JobId: "23", State: loomv1.JobState_FAILED, ExitCode: 3, StateReason: "NonZeroExitCode"}, true, "")
	if !strings.HasPrefix(ran, "a replica exited with code 3; see the job's output (loom jobs logs 23)") {
		t.Errorf("a replica that exited: %q", ran)
	}
}

// TestFailureOfAJobWhoseOutputWentWithItsCluster: a CustomJob on its own
// (ephemeral) cluster without a local base output directory has its
// output in the cluster's shared directory, deleted when the job ends, so
// its failure does not send the user to `loom jobs logs` (which answers
// "no longer exists") but says how to keep the output next time. One on
// a cluster that stays, or with a local base output directory (a trial's
// too), is still sent to read it.
func TestFailureOfAJobWhoseOutputWentWithItsCluster(t *testing.T) {
	t.Parallel()
	spec := func(prefix, persistent string) *trainingv1.CustomJob {
		s := &trainingv1.CustomJobSpec{PersistentResourceId: persistent}
		if prefix != "" {
			s.BaseOutputDirectory = &trainingv1.GcsDestination{OutputUriPrefix: prefix}
		}
		return &trainingv1.CustomJob{JobSpec: s}
	}
	for _, c := range []struct {
		name string
		cj   *CJ
		kept bool
	}{
		{"ephemeral, no base output directory", &CJ{Job: spec("", ""), Ephemeral: true}, false},
		{"ephemeral, a bucket", &CJ{Job: spec("gs://b/p", ""), Ephemeral: true}, false},
		{"ephemeral, a relative path", &CJ{Job: spec("data/p", ""), Ephemeral: true}, false},
		{"ephemeral, file://", &CJ{Job: spec("file:///data/p", ""), Ephemeral: true}, true},
		{"ephemeral trial, an absolute path", &CJ{Job: spec("/data/p", ""), Ephemeral: true, TrialID: "3"}, true},
		{"a persistent resource", &CJ{Job: spec("", "pool"), Ephemeral: false}, true},
	} {
		if got := outputKept(c.cj); got != c.kept {
			t.Errorf("%s: outputKept %v, want %v", c.name, got, c.kept)
		}
	}
	j := &loomv1.Job{JobId: "5", Cluster: "projects/default/clusters/cj-5", State: loomv1.JobState_FAILED, ExitCode: 2, StateReason: "NonZeroExitCode"}
	gone := failure(j, outputKept(&CJ{Job: spec("", ""), Ephemeral: true}), "")
	if strings.Contains(gone, "see the job's output") || !strings.Contains(gone, "exited with code 2") ||
		!strings.Contains(gone, "deleted with its cluster cj-5") || !strings.Contains(gone, "base_output_directory") {
		t.Errorf("a failed job whose output went with its cluster: %q", gone)
	}
}

// TestCustomJobRetriedFailureDoesNotEndIt: the scheduler reports a failed
// run of a job it will retry (a replica exited non-zero within
// max_retries, a preemption of a requeueable job) as FAILED (PREEMPTED),
// then REQUEUED in the same change. A tester's CustomJob whose replica
// exited 2 ended FAILED on that first event, "after 1 failed run(s)", and
// its cluster was deleted under the retry the docs promise ("restarted
// ... up to 3 times"). The run that ends the retries still ends it.
func TestCustomJobRetriedFailureDoesNotEndIt(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, s *State) {
		t.Helper()
		feed(t, s, customJob(cjName, "alice", spec()))
		feed(t, s, clusterIs("projects/p/clusters/cj-101", loomv1.Cluster_RUNNING))
		feed(t, s, jobIs("projects/p/jobs/101", loomv1.JobState_RUNNING))
	}
	failed := func(attempt, failures int32, st loomv1.JobState, reason string) *eventsv1.JobChanged {
		ev := jobIs("projects/p/jobs/101", st)
		ev.Attempt = attempt
		ev.Job.MaxRetries, ev.Job.UserFailures, ev.Job.StateReason = WorkerRestarts, failures, reason
		return ev
	}
	t.Run("user failures", func(t *testing.T) {
		t.Parallel()
		s := NewState()
		run(t, s)
		for k := int32(1); k <= WorkerRestarts; k++ {
			ev := failed(k, k, loomv1.JobState_FAILED, "NonZeroExitCode")
			ev.RequeueFollows = true // the scheduler retries it (max_retries)
			c := feed(t, s, ev)
			if dels, _ := emitted[*eventsv1.DeleteCluster](c); len(dels) != 0 {
				t.Fatalf("failure %d of %d retries deleted the cluster: %v", k, WorkerRestarts, c.Emits)
			}
			if got := cjOf(t, s, cjName); JobEnded(got.GetState()) {
				t.Fatalf("failure %d of %d retries ended the custom job: %v", k, WorkerRestarts, got)
			}
			rq := failed(k, k, loomv1.JobState_REQUEUED, "NonZeroExitCode: retry")
			rq.Job.RestartCount = k
			feed(t, s, rq)
			if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_PENDING || got.GetRestartCount() != k {
				t.Fatalf("requeued %d: %v", k, got)
			}
			r := jobIs("projects/p/jobs/101", loomv1.JobState_RUNNING)
			r.Attempt = k + 1
			feed(t, s, r)
		}
		c := feed(t, s, failed(WorkerRestarts+1, WorkerRestarts+1, loomv1.JobState_FAILED, "NonZeroExitCode"))
		got := cjOf(t, s, cjName)
		if dels, _ := emitted[*eventsv1.DeleteCluster](c); got.GetState() != trainingv1.JobState_JOB_STATE_FAILED || len(dels) != 1 ||
			!strings.Contains(got.GetError().GetMessage(), "after 4 failed run(s)") {
			t.Fatalf("retries spent: %v, emitted %v", got, c.Emits)
		}
	})
	for name, ev := range map[string]*eventsv1.JobChanged{
		// Not a failure of its program: fail() ends it with its first user failure counted before.
		"launch failure": failed(2, 1, loomv1.JobState_FAILED, "JobLaunchFailure on n-0001: no such file"),
		"retries disabled": func() *eventsv1.JobChanged {
			ev := failed(1, 1, loomv1.JobState_FAILED, "NonZeroExitCode")
			ev.Job.MaxRetries = 0 // disable_retries
			return ev
		}(),
		"preempted, no requeue": func() *eventsv1.JobChanged {
			ev := failed(1, 0, loomv1.JobState_PREEMPTED, "Preempted")
			no := false
			ev.Job.Requeue = &no
			return ev
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := NewState()
			run(t, s)
			feed(t, s, ev)
			if got := cjOf(t, s, cjName); got.GetState() != trainingv1.JobState_JOB_STATE_FAILED {
				t.Fatalf("a final %v: %v", ev.GetJob().GetState(), got)
			}
		})
	}
	for _, st := range []loomv1.JobState{loomv1.JobState_PREEMPTED, loomv1.JobState_NODE_FAIL, loomv1.JobState_OUT_OF_MEMORY} {
		t.Run(st.String()+", requeued", func(t *testing.T) {
			t.Parallel()
			s := NewState()
			run(t, s)
			ev := failed(1, 0, st, "")
			ev.RequeueFollows = true
			c := feed(t, s, ev)
			if got := cjOf(t, s, cjName); JobEnded(got.GetState()) {
				t.Fatalf("a %v the scheduler requeues ended the custom job: %v, emitted %v", st, got, c.Emits)
			}
		})
	}
}
