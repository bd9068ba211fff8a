package slurmcli

import (
	"strings"
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
		// On another type too (Slurm 22.05, which does not wait for it).
		{pending("afterok:13+5"), "afterok:13+5(unfulfilled)"},
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

// TestDependencyMarksReadTheirTargets: scontrol show job ID and squeue -o %E
// read the jobs a pending job's dependencies name, whatever their state, so
// that a met dependency is not shown "(unfulfilled)": before, scontrol show
// job 13 read job 13 alone and marked every dependency unfulfilled, and
// squeue printed the raw spec.
func TestDependencyMarksReadTheirTargets(t *testing.T) {
	t.Parallel()
	f := fixture()
	for _, j := range f.Jobs {
		if j.GetJobId() == "13" {
			j.Dependency, j.StateReason = "afterok:10:12,afterany:11", "Dependency"
		}
	}
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "13")
	if code != 0 || errOut != "" {
		t.Fatalf("scontrol show job 13: exit %d, %q", code, errOut)
	}
	if !strings.Contains(out, "Dependency=afterok:12(unfulfilled)\n") {
		t.Errorf("scontrol show job 13: want only job 12 still in the way (10 completed, 11 ended):\n%s", out)
	}
	code, out, errOut = run(t, f, "squeue", Env{}, "-h", "-j", "13", "-o", "%i %E")
	if code != 0 || errOut != "" || out != "13 afterok:12(unfulfilled)\n" {
		t.Errorf("squeue -o '%%i %%E': exit %d, %q, %q; want \"13 afterok:12(unfulfilled)\"", code, out, errOut)
	}
}
