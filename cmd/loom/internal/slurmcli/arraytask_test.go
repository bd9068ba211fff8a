package slurmcli

import (
	"strings"
	"testing"
)

// TestShowJobOfAPendingArrayTask: "scontrol show job A_2" for a task still
// inside its array's pending record prints that task alone, as a real Slurm
// 22.05 did (sbatch --hold --array=0-3%2; scontrol show job 8_2: "JobId=8
// ArrayJobId=8 ArrayTaskId=2 ArrayTaskThrottle=2", "StdOut=.../slurm-8_2.out"),
// and "scontrol show job A" still the whole record.
func TestShowJobOfAPendingArrayTask(t *testing.T) {
	t.Parallel()
	f := fixture()
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "15_2")
	if code != 0 || strings.Count(out, "ArrayTaskId=") != 1 ||
		!strings.Contains(out, "JobId=15 ArrayJobId=15 ArrayTaskId=2 ArrayTaskThrottle=2 JobName=sweep\n") ||
		!strings.Contains(out, "/slurm-15_2.out\n") {
		t.Errorf("show job 15_2: %d %q %q, want task 2's record alone", code, out, errOut)
	}
	code, out, errOut = run(t, f, "scontrol", Env{}, "-o", "show", "job", "15_1,15_3")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "ArrayTaskId=1 ") || !strings.Contains(out, "ArrayTaskId=3 ") {
		t.Errorf("show job 15_1,15_3: %d %q %q, want two records", code, out, errOut)
	}
	code, out, errOut = run(t, f, "scontrol", Env{}, "show", "job", "15")
	if code != 0 || !strings.Contains(out, "ArrayTaskId=1-3%2 ") && !strings.Contains(out, "ArrayTaskId=1-3 ") {
		t.Errorf("show job 15: %d %q %q, want the pending record whole", code, out, errOut)
	}
}
