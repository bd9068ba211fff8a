package slurmcli

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestExitCodeKeepsSignalApart: a job whose script exited 130 and one killed
// by SIGINT (both code 130 in Loom) show as a real Slurm 22.05 showed them
// (scripts/slurm-local.sh: `exit 130` vs `kill -INT $$`): ExitCode 130:0 and
// 0:2 in scontrol (and in sacct -c's completion file), sbatch --wait 130 and
// 1; sacct's ExitCode takes 128 from an exit status of 128 or more, as Slurm
// 22.05's src/sacct/print.c does (PRINT_EXITCODE), so `exit 130` is 2:0 there
// while DerivedExitCode keeps the status whole; srun says "Exited with
// exit code 137" for a task that exited 137 and "Killed" for one killed by
// SIGKILL. Records without the signal (from before it was kept) read as
// they did: 128+n is signal n.
func TestExitCodeKeepsSignalApart(t *testing.T) {
	t.Parallel()
	f := fixture()
	exited := proto.Clone(f.Jobs[2]).(*loomv1.Job) // 11, FAILED
	exited.JobId, exited.Name, exited.ExitCode, exited.ExitSignal = "30", "projects/default/jobs/30", 130, proto.Int32(0)
	exited.Runs = []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_FAILED, Nodes: exited.GetNodes(), StartTime: exited.GetStartTime(),
		EndTime: exited.GetEndTime(), ExitCode: 130, ExitSignal: proto.Int32(0)}}
	killed := proto.Clone(exited).(*loomv1.Job)
	killed.JobId, killed.Name, killed.ExitSignal, killed.Runs[0].ExitSignal = "31", "projects/default/jobs/31", proto.Int32(2), proto.Int32(2)
	old := proto.Clone(exited).(*loomv1.Job)
	old.JobId, old.Name, old.ExitSignal, old.Runs[0].ExitSignal = "32", "projects/default/jobs/32", nil, nil
	f.Jobs = append(f.Jobs, exited, killed, old)
	code, out, errOut := run(t, f, "sacct", Env{}, "-P", "-n", "-o", "JobID,ExitCode", "-j", "30,31,32")
	if want := "30|2:0\n30.batch|2:0\n31|0:2\n31.batch|0:2\n32|0:2\n32.batch|0:2\n"; code != 0 || out != want {
		t.Errorf("sacct: %d %q %q, want %q", code, out, errOut, want)
	}
	// A step that exited 200 (72:0 in sacct), and the DerivedExitCode it
	// makes for its job (200:0: Slurm's PRINT_DERIVED_EC takes nothing off).
	f.Steps = append(f.Steps, &loomv1.JobStep{Job: exited.GetName(), Name: exited.GetName() + "/steps/0", State: loomv1.JobState_FAILED,
		StartTime: exited.GetStartTime(), EndTime: exited.GetEndTime(), ExitCode: 200, ExitSignal: proto.Int32(0), Command: []string{"false"}})
	code, out, errOut = run(t, f, "sacct", Env{}, "-P", "-n", "-o", "JobID,ExitCode,DerivedExitCode", "-j", "30")
	if want := "30|2:0|200:0\n30.batch|2:0|\n30.0|72:0|\n"; code != 0 || out != want {
		t.Errorf("sacct with a step: %d %q %q, want %q", code, out, errOut, want)
	}
	for id, want := range map[string]string{"30": "ExitCode=130:0", "31": "ExitCode=0:2", "32": "ExitCode=0:2"} {
		if code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", id); code != 0 || !strings.Contains(out, want+"\n") {
			t.Errorf("scontrol show job %s: %d %q %q, want %s", id, code, out, errOut, want)
		}
	}
	for _, c := range []struct {
		job  *loomv1.Job
		want int
	}{{exited, 130}, {killed, 1}, {old, 1}} {
		var e *Error
		if err := exitFromJob(c.job); !errors.As(err, &e) || e.Code != c.want {
			t.Errorf("sbatch --wait for job %s: %v, want exit %d", c.job.GetJobId(), err, c.want)
		}
	}

	var errb strings.Builder
	cm := &cmd{name: "srun", stdout: &strings.Builder{}, stderr: &errb}
	step := &loomv1.JobStep{State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0001"}, TasksPerNode: []int32{3},
		TaskExitCodes: []int32{137, 137, 130}, TaskExitSignals: []int32{0, 9, 0}, ExitCode: 137, ExitSignal: proto.Int32(9)}
	var e *Error
	if err := cm.stepOutcome(step, "30.0"); !errors.As(err, &e) || e.Code != 137 {
		t.Errorf("srun exits %v, want 137", err)
	}
	want := "srun: error: gpu-0001: task 0: Exited with exit code 137\nsrun: error: gpu-0001: task 1: Killed\nsrun: error: gpu-0001: task 2: Exited with exit code 130\n"
	if errb.String() != want {
		t.Errorf("srun's stderr %q, want %q", errb.String(), want)
	}
}

// TestSrunExitIsOverTasks: srun's exit status is its tasks', as a real Slurm
// 22.05's srun gave it, not the step's ExitCode: a task killed by SIGKILL on
// one node and one that exited 3 on another end the step 3:0 but srun 137;
// tasks that exited 5, 7 and 0 end srun 7 whatever the step's record says
// (Slurm's shows 0:0 there, its node's last task).
func TestSrunExitIsOverTasks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		step *loomv1.JobStep
		want int
	}{
		{&loomv1.JobStep{State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0001", "gpu-0002"}, TasksPerNode: []int32{1, 1},
			TaskExitCodes: []int32{3, 137}, TaskExitSignals: []int32{0, 9}, ExitCode: 3, ExitSignal: proto.Int32(0)}, 137},
		{&loomv1.JobStep{State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0001"}, TasksPerNode: []int32{3},
			TaskExitCodes: []int32{5, 7, 0}, TaskExitSignals: []int32{0, 0, 0}, ExitCode: 0, ExitSignal: proto.Int32(0)}, 7},
		{&loomv1.JobStep{State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0001"}, TasksPerNode: []int32{2},
			TaskExitCodes: []int32{200, 137}, TaskExitSignals: []int32{0, 9}, ExitCode: 137, ExitSignal: proto.Int32(9)}, 137},
	} {
		cm := &cmd{name: "srun", stdout: &strings.Builder{}, stderr: &strings.Builder{}}
		var e *Error
		if err := cm.stepOutcome(c.step, "30.0"); !errors.As(err, &e) || e.Code != c.want {
			t.Errorf("srun for tasks %v/%v exits %v, want %d", c.step.GetTaskExitCodes(), c.step.GetTaskExitSignals(), err, c.want)
		}
	}
}

// TestSrunNamesTheNodeOfEachRank: srun's report of failed tasks, and
// sstat's tasks not yet reported, name the node each rank ran on under the
// step's -m (cyclic on two nodes: ranks 1 and 3 on the second), as the
// scheduler laid them out (slurmspec.TaskRanks), not in blocks.
func TestSrunNamesTheNodeOfEachRank(t *testing.T) {
	t.Parallel()
	var errb strings.Builder
	cm := &cmd{name: "srun", stdout: &strings.Builder{}, stderr: &errb}
	step := &loomv1.JobStep{State: loomv1.JobState_FAILED, Nodes: []string{"gpu-0001", "gpu-0002"}, TasksPerNode: []int32{2, 2},
		Distribution: "cyclic", TaskExitCodes: []int32{0, 5, 0, 7}, TaskExitSignals: []int32{0, 0, 0, 0}, ExitCode: 7, ExitSignal: proto.Int32(0)}
	var e *Error
	if err := cm.stepOutcome(step, "30.0"); !errors.As(err, &e) || e.Code != 7 {
		t.Errorf("srun exits %v, want 7", err)
	}
	if want := "srun: error: gpu-0002: task 1: Exited with exit code 5\nsrun: error: gpu-0002: task 3: Exited with exit code 7\n"; errb.String() != want {
		t.Errorf("srun's stderr %q, want %q", errb.String(), want)
	}
	slots := withTaskSlots(step).GetTaskUsage()
	got := map[int32]string{}
	for _, u := range slots {
		got[u.GetRank()] = u.GetNode()
	}
	if want := map[int32]string{0: "gpu-0001", 1: "gpu-0002", 2: "gpu-0001", 3: "gpu-0002"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sstat's task slots %v, want %v", got, want)
	}
}
