package domain

import (
	"strings"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestFailureSaysWhatHappened: a job whose replica could not start (the
// agent's JobLaunchFailure: nothing ran) is not told to read an output
// that does not exist; a replica that ran and exited is.
func TestFailureSaysWhatHappened(t *testing.T) {
	t.Parallel()
	launch := failure(&loomv1.Job{JobId: "22", State: loomv1.JobState_FAILED, ExitCode: 1,
		StateReason: "JobLaunchFailure on a3-0001: open output /shared/slurm-22.out: permission denied"})
	if !strings.HasPrefix(launch, "a replica could not start") || strings.Contains(launch, "loom jobs logs") ||
		!strings.Contains(launch, "permission denied") {
		t.Errorf("a launch failure: %q", launch)
	}
	ran := failure(&loomv1.Job{JobId: "23", State: loomv1.JobState_FAILED, ExitCode: 3, StateReason: "NonZeroExitCode"})
	if !strings.HasPrefix(ran, "a replica exited with code 3; see the job's output (loom jobs logs 23)") {
		t.Errorf("a replica that exited: %q", ran)
	}
}
