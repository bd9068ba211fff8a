package domain

import (
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
