package slurmcli

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestDerivedExitCodeIsTheHighestStep: DerivedExitCode (sacct, scontrol -d
// show job) is the highest of the job's srun steps' ends, not the job's own
// code, as a real Slurm 22.05 showed them (scripts/slurm-local.sh, `sbatch
// --wrap` of each script below): the highest exit code, else the highest
// signal, and 0:0 with no step, the batch script's own end never counted.
// A step that never started or has not ended counts for nothing.
func TestDerivedExitCodeIsTheHighestStep(t *testing.T) {
	t.Parallel()
	f := fixture()
	base := f.Jobs[2] // 11, FAILED, two runs
	ended := func(code, sig int32) *loomv1.JobStep {
		state := loomv1.JobState_COMPLETED
		if code != 0 || sig != 0 {
			state = loomv1.JobState_FAILED
		}
		return &loomv1.JobStep{State: state, StartTime: base.GetStartTime(), EndTime: base.GetEndTime(), ExitCode: code, ExitSignal: proto.Int32(sig)}
	}
	for _, c := range []struct {
		id        string
		code, sig int32
		steps     []*loomv1.JobStep
		want      string
	}{
		// srun exit 3; srun kill -9 $$; exit 1  →  ExitCode=1:0 DerivedExitCode=3:0
		{"40", 1, 0, []*loomv1.JobStep{ended(3, 0), ended(137, 9)}, "3:0"},
		// srun true; exit 5  →  5:0, 0:0
		{"41", 5, 0, []*loomv1.JobStep{ended(0, 0)}, "0:0"},
		// srun kill -9 $$; exit 0  →  0:0, 0:9
		{"42", 0, 0, []*loomv1.JobStep{ended(137, 9)}, "0:9"},
		// exit 2 (no step)  →  2:0, 0:0
		{"43", 2, 0, nil, "0:0"},
		// srun kill -9 $$; srun exit 1; exit 0  →  0:0, 1:0
		{"44", 0, 0, []*loomv1.JobStep{ended(137, 9), ended(1, 0)}, "1:0"},
		// a step still running and one that never started: nothing yet
		{"45", 0, 0, []*loomv1.JobStep{{State: loomv1.JobState_RUNNING, StartTime: base.GetStartTime()},
			{State: loomv1.JobState_CANCELLED, ExitCode: 143}}, "0:0"},
	} {
		j := proto.Clone(base).(*loomv1.Job)
		j.JobId, j.Name, j.ExitCode, j.ExitSignal, j.Runs = c.id, "projects/default/jobs/"+c.id, c.code, proto.Int32(c.sig), nil
		f.Jobs = append(f.Jobs, j)
		for i, s := range c.steps {
			s.Job, s.StepId, s.Name = j.Name, int32(i), fmt.Sprintf("%s/steps/%d", j.Name, i)
			f.Steps = append(f.Steps, s)
		}
	}
	pending := f.Jobs[1] // 13, PENDING
	code, out, errOut := run(t, f, "sacct", Env{}, "-X", "-P", "-n", "-o", "JobID,ExitCode,DerivedExitCode", "-j", "40,41,42,43,44,45")
	if want := "40|1:0|3:0\n41|5:0|0:0\n42|0:0|0:9\n43|2:0|0:0\n44|0:0|1:0\n45|0:0|0:0\n"; code != 0 || out != want {
		t.Errorf("sacct -X: %d %q %q, want %q", code, out, errOut, want)
	}
	// With the step rows: the job's row alone has it.
	code, out, errOut = run(t, f, "sacct", Env{}, "-P", "-n", "-o", "JobID,DerivedExitCode", "-j", "42")
	if want := "42|0:9\n42.batch|\n42.0|\n"; code != 0 || out != want {
		t.Errorf("sacct: %d %q %q, want %q", code, out, errOut, want)
	}
	for id, want := range map[string]string{pending.GetJobId(): "0:0", "40": "3:0", "42": "0:9", "44": "1:0"} {
		code, out, errOut := run(t, f, "scontrol", Env{}, "-d", "show", "job", id)
		if code != 0 || !strings.Contains(out, " ExitCode=") || !strings.Contains(out, ":0\n   DerivedExitCode="+want+"\n   RunTime=") {
			t.Errorf("scontrol -d show job %s: %d %q %q, want DerivedExitCode=%s on the line after ExitCode", id, code, out, errOut, want)
		}
		// Without -d, as Slurm's: no DerivedExitCode line.
		if _, out, _ := run(t, f, "scontrol", Env{}, "show", "job", id); strings.Contains(out, "DerivedExitCode") {
			t.Errorf("scontrol show job %s without -d: %q", id, out)
		}
	}
}

// TestDerivedExitCodeAsTheSchedulerKeptIt: DerivedExitCode is the one the
// scheduler kept for each run (Job.derived_exit_code, JobRun's), over every
// step that ended, and not only over the steps the run still keeps: a run
// whose first of 300 steps failed (3:0) and whose kept 256 all exited 0
// still shows 3:0 in sacct and scontrol -d, and an older run its own (0:9)
// with none of its steps kept.
func TestDerivedExitCodeAsTheSchedulerKeptIt(t *testing.T) {
	t.Parallel()
	f := fixture()
	j := proto.Clone(f.Jobs[2]).(*loomv1.Job) // 11, FAILED, two runs
	j.JobId, j.Name = "50", "projects/default/jobs/50"
	j.DerivedExitCode, j.DerivedExitSignal = proto.Int32(3), proto.Int32(0)
	j.Runs[0].DerivedExitCode, j.Runs[0].DerivedExitSignal = proto.Int32(0), proto.Int32(9)
	j.Runs[1].DerivedExitCode, j.Runs[1].DerivedExitSignal = proto.Int32(3), proto.Int32(0)
	f.Jobs = append(f.Jobs, j)
	for i := range 256 {
		f.Steps = append(f.Steps, &loomv1.JobStep{Job: j.Name, StepId: int32(44 + i), Name: fmt.Sprintf("%s/steps/%d", j.Name, 44+i),
			Attempt: 2, State: loomv1.JobState_COMPLETED, StartTime: j.GetStartTime(), EndTime: j.GetEndTime(), ExitSignal: proto.Int32(0)})
	}
	code, out, errOut := run(t, f, "sacct", Env{}, "-X", "-D", "-P", "-n", "-o", "JobID,ExitCode,DerivedExitCode", "-j", "50")
	if want := "50|0:0|0:9\n50|2:0|3:0\n"; code != 0 || out != want {
		t.Errorf("sacct -X -D: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, f, "scontrol", Env{}, "-d", "show", "job", "50")
	if code != 0 || !strings.Contains(out, "\n   DerivedExitCode=3:0\n") {
		t.Errorf("scontrol -d show job 50: %d %q %q, want DerivedExitCode=3:0", code, out, errOut)
	}
}
