package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestJobsGetCancelledBy: `loom jobs get` of a cancelled job says who
// cancelled it (Job.cancelled_by, as the scheduler recorded it) and how
// its script ended when the cancel killed it (its run's batch end), where
// the job's own exit code is 0.
func TestJobsGetCancelledBy(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := &loomv1.Job{Name: "projects/default/jobs/12", JobId: "12", Cluster: "projects/default/clusters/demo",
		State: loomv1.JobState_CANCELLED, CancelledBy: "ana", NodeCount: 1, SubmitTime: timestamppb.New(now.Add(-time.Minute)),
		Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_CANCELLED, BatchExitCode: proto.Int32(143), BatchExitSignal: proto.Int32(15)}}}
	var b strings.Builder
	if err := renderJob(&b, j, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"State:          CANCELLED\n", "Cancelled by:   ana\n", "Exit code:      0 (its script killed by signal 15)\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("jobs get of a cancelled job:\n%s\nwant a line %q", b.String(), want)
		}
	}
}
