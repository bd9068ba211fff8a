package slurmcli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSacctCancelledBy: a cancelled job's State is Slurm 22.05's
// "CANCELLED by UID" (src/sacct/print.c, PRINT_STATE): the uid of the
// account Job.cancelled_by names where this machine has it (root: 0), the
// name otherwise; "CANCELLED+" in the default 10 columns. Its .batch row's
// ExitCode is how the script died (0:15, its run's batch end), the job's
// row 0:0, and scontrol show job says ExitCode=0:15, as Slurm's said for a
// job cancelled while it ran. A job nobody is recorded for says CANCELLED.
func TestSacctCancelledBy(t *testing.T) {
	t.Parallel()
	f := fixture()
	base := proto.Clone(f.Jobs[2]).(*loomv1.Job) // 11, FAILED: a started job with an end
	cancelled := func(id, by string) *loomv1.Job {
		j := proto.Clone(base).(*loomv1.Job)
		j.JobId, j.Name, j.State, j.ExitCode, j.StateReason, j.CancelledBy = id, "projects/default/jobs/"+id, loomv1.JobState_CANCELLED, 0, "", by
		j.Runs = []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_CANCELLED, Nodes: j.GetNodes(), StartTime: j.GetStartTime(),
			EndTime: j.GetEndTime(), BatchExitCode: proto.Int32(143), BatchExitSignal: proto.Int32(15)}}
		return j
	}
	nobody := cancelled("42", "")
	nobody.Runs[0].BatchExitCode, nobody.Runs[0].BatchExitSignal = nil, nil
	f.Jobs = append(f.Jobs, cancelled("40", "root"), cancelled("41", "no-such-loom-user"), nobody)
	code, out, errOut := run(t, f, "sacct", Env{}, "-P", "-n", "-o", "JobID,State,ExitCode", "-j", "40,41,42")
	want := "40|CANCELLED by 0|0:0\n40.batch|CANCELLED|0:15\n41|CANCELLED by no-such-loom-user|0:0\n41.batch|CANCELLED|0:15\n" +
		"42|CANCELLED|0:0\n42.batch|CANCELLED|0:0\n"
	if code != 0 || out != want {
		t.Errorf("sacct: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, f, "sacct", Env{}, "-n", "-X", "-o", "JobID,State", "-j", "40")
	if want := "40           CANCELLED+ \n"; code != 0 || out != want {
		t.Errorf("sacct in 10 columns: %d %q %q, want %q", code, out, errOut, want)
	}
	for id, want := range map[string]string{"40": "ExitCode=0:15", "42": "ExitCode=0:0"} {
		if code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", id); code != 0 || !strings.Contains(out, want+"\n") {
			t.Errorf("scontrol show job %s: %d %q %q, want %s", id, code, out, errOut, want)
		}
	}
}

// TestSacctStepCancelledBy: a step cancelled by scancel JOB.STEP shows
// "CANCELLED by UID" on its own row, as Slurm 22.05's sacct prints a
// step's requid (src/sacct/print.c, PRINT_STATE), root's uid 0 where this
// machine has the account, the name otherwise; a step cancelled with no
// one recorded (it ended with its job) says CANCELLED, and one that
// failed its own way nothing more, whoever is recorded.
func TestSacctStepCancelledBy(t *testing.T) {
	t.Parallel()
	f := fixture()
	j := proto.Clone(f.Jobs[2]).(*loomv1.Job) // 11, FAILED: a started job with an end
	j.JobId, j.Name = "50", "projects/default/jobs/50"
	j.Runs = []*loomv1.JobRun{{Attempt: 1, State: j.GetState(), Nodes: j.GetNodes(), StartTime: j.GetStartTime(), EndTime: j.GetEndTime()}}
	f.Jobs = append(f.Jobs, j)
	for i, s := range []struct {
		state loomv1.JobState
		by    string
	}{{loomv1.JobState_CANCELLED, "root"}, {loomv1.JobState_CANCELLED, "no-such-loom-user"}, {loomv1.JobState_CANCELLED, ""},
		{loomv1.JobState_FAILED, "root"}} {
		f.Steps = append(f.Steps, &loomv1.JobStep{Job: j.GetName(), Name: j.GetName() + "/steps/" + string(rune('0'+i)), StepId: int32(i),
			State: s.state, CancelledBy: s.by, StartTime: j.GetStartTime(), EndTime: j.GetEndTime(), ExitCode: 1, Command: []string{"sleep"}})
	}
	code, out, errOut := run(t, f, "sacct", Env{}, "-P", "-n", "-o", "JobID,State", "-j", "50")
	want := "50|FAILED\n50.batch|FAILED\n50.0|CANCELLED by 0\n50.1|CANCELLED by no-such-loom-user\n50.2|CANCELLED\n50.3|FAILED\n"
	if code != 0 || out != want {
		t.Errorf("sacct: %d %q %q, want %q", code, out, errOut, want)
	}
}
