package slurmcli

import (
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestDependencyText(t *testing.T) {
	t.Parallel()
	jobs := map[string]*loomv1.Job{
		"10": {JobId: "10", State: loomv1.JobState_RUNNING},
		"11": {JobId: "11", State: loomv1.JobState_COMPLETED},
		"12": {JobId: "12", State: loomv1.JobState_FAILED},
		"13": {JobId: "13", State: loomv1.JobState_PENDING},
		"20": {JobId: "20", ArrayJobId: "20", ArrayTaskId: 0, State: loomv1.JobState_COMPLETED},
		"21": {JobId: "21", ArrayJobId: "20", ArrayTaskId: 1, State: loomv1.JobState_PENDING},
	}
	pending := func(dep string) *loomv1.Job {
		return &loomv1.Job{State: loomv1.JobState_PENDING, Dependency: dep, StateReason: "Dependency"}
	}
	task := func(index int32, dep string) *loomv1.Job {
		j := pending(dep)
		j.ArrayJobId, j.ArrayTaskId = "30", index
		return j
	}
	cases := []struct {
		job  *loomv1.Job
		want string
	}{
		{pending("afterok:10"), "afterok:10(unfulfilled)"},
		{pending("afterok:11"), "(null)"},
		{pending("afterok:12"), "afterok:12(failed)"},
		{pending("afternotok:11"), "afternotok:11(failed)"},
		{pending("afterany:10:11"), "afterany:10(unfulfilled)"},
		{pending("after:10"), "(null)"},
		// A whole array is "A_*", as Slurm 22.05 shows it (checked there).
		{pending("afterok:20"), "afterok:20_*(unfulfilled)"},
		{pending("afterok:10:20"), "afterok:10(unfulfilled),afterok:20_*(unfulfilled)"},
		// A delay is kept: Slurm shows "after:13+5(unfulfilled)".
		{pending("after:13+5"), "after:13+5(unfulfilled)"},
		{pending("afterok:20_0"), "(null)"},
		{pending("afterok:10?afterok:12"), "afterok:10(unfulfilled)?afterok:12(failed)"},
		{pending("singleton"), "singleton(unfulfilled)"},
		{&loomv1.Job{State: loomv1.JobState_RUNNING, Dependency: "afterok:11"}, "(null)"},
		{pending("afterburstbuffer:12"), "(null)"},
		{pending("afterburstbuffer:10"), "afterburstbuffer:10(unfulfilled)"},
		// aftercorr: a task waits for its twin alone; one with none, for nothing.
		{task(0, "aftercorr:20"), "(null)"},
		{task(1, "aftercorr:20"), "aftercorr:20_*(unfulfilled)"},
		{task(2, "aftercorr:20"), "(null)"},
		{pending("aftercorr:20"), "aftercorr:20_*(unfulfilled)"},
	}
	for _, c := range cases {
		if got := dependencyText(c.job, jobs); got != c.want {
			t.Errorf("%q: got %q, want %q", c.job.GetDependency(), got, c.want)
		}
	}
}
