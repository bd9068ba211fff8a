package slurmcli

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// bigFixture is the fixture plus 25 pending jobs of alice's (ids 100..124)
// with 200 KB of environment each: 5 MB, more than one gRPC message holds.
func bigFixture() (*fakegw.Gateway, []string) {
	f := fixture()
	big := strings.Repeat("e", 200<<10)
	var ids []string
	for i := range 25 {
		id := strconv.Itoa(100 + i)
		f.Jobs = append(f.Jobs, &loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: demoCluster,
			DisplayName: "big", User: "alice", Partition: "gpu", State: loomv1.JobState_PENDING, StateReason: "JobHeldUser",
			NodeCount: 1, SubmitTime: ago(time.Hour), Env: map[string]string{"BIG": big}})
		ids = append(ids, id)
	}
	return f, ids
}

// TestSlurmCommandsPageThroughBigLists is the regression test of sacct,
// squeue and scontrol show job failing for everyone once the jobs took
// more than 4 MB: each lists all of them, reading the list page by page.
func TestSlurmCommandsPageThroughBigLists(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		rows func(out string) []string
	}{
		{"squeue", []string{"-h", "-n", "big", "-o", "%i"}, strings.Fields},
		{"sacct", []string{"-n", "-X", "--name", "big", "-o", "JobID", "-S", "now-1days"}, strings.Fields},
		{"scontrol", []string{"show", "job"}, func(out string) []string {
			var ids []string
			for _, f := range strings.Fields(out) {
				if id, ok := strings.CutPrefix(f, "JobId="); ok {
					if n, _ := strconv.Atoi(id); n >= 100 {
						ids = append(ids, id)
					}
				}
			}
			return ids
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, want := bigFixture()
			code, out, errOut := run(t, f, tc.name, Env{}, tc.args...)
			if code != 0 {
				t.Fatalf("%s %v: exit %d: %s", tc.name, tc.args, code, errOut)
			}
			if got := tc.rows(out); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("%s %v listed %v, want every big job: %v", tc.name, tc.args, got, want)
			}
			paged := 0
			for _, r := range fakegw.Requests[*loomv1.ListJobsRequest](f) {
				if r.GetPageToken() != "" {
					paged++
				}
			}
			if paged == 0 {
				t.Fatalf("%s read the list in one call; want it paged", tc.name)
			}
		})
	}
}
