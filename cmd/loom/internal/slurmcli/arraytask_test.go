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

// TestArrayLastPendingTaskIsOne: an array with one task left pending
// behind its limit shows it as that task, as Slurm 22.05 did beside Loom
// (--array=0-1%1, task 0 running: squeue "12_1 12 12 1 PENDING
// JobArrayTaskLimit" for %i %A %F %K %T %r, scontrol show job
// "ArrayTaskId=1 ArrayTaskThrottle=1", StdOut=.../slurm-12_1.out), not
// "12_[1%1]"; two or more are
// still "12_[1-3%1]".
func TestArrayLastPendingTaskIsOne(t *testing.T) {
	t.Parallel()
	f := fixture()
	for _, j := range f.Jobs {
		if j.GetJobId() == "15" {
			j.Array = "0-1%1"
		}
	}
	code, out, errOut := run(t, f, "squeue", Env{}, "-h", "-n", "sweep", "-o", "%i %A %F %K %T %r")
	if want := "15_1 15 15 1 PENDING JobArrayTaskLimit\n15_0 16 15 0 RUNNING None\n"; code != 0 || out != want {
		t.Errorf("squeue: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, f, "sacct", Env{}, "-P", "-n", "-X", "-o", "JobID,JobIDRaw,State", "-j", "15")
	if want := "15_0|16|RUNNING\n15_1|15|PENDING\n"; code != 0 || out != want {
		t.Errorf("sacct: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, f, "scontrol", Env{}, "show", "job", "15_1")
	if want := "JobId=15 ArrayJobId=15 ArrayTaskId=1 ArrayTaskThrottle=1 JobName=sweep\n"; code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("scontrol show job 15_1: %d %q %q, want it to start %q", code, out, errOut, want)
	}
	if want := "   StdOut=/home/alice/slurm-15_1.out\n"; !strings.Contains(out, want) {
		t.Errorf("scontrol show job 15_1: %q, want %q (Slurm's slurm-12_1.out)", out, want)
	}
}
