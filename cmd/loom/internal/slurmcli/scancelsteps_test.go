package slurmcli

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestScancelStepRefusals: scancel JOB.STEP answers as Slurm 22.05's
// (recorded with scripts/slurm-local.sh): "Kill job error on job step id",
// with a signal too; an unknown or ended job names JOB.STEP, exit 1; a
// step the running job does not have (or had: it has ended) names the job
// alone, exit 225 (ESLURM_INVALID_JOB_ID), and a signal to it, or either
// to a pending job's step, says nothing, exit 0.
func TestScancelStepRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		code    int
		errOut  string
		stopped bool // step 12.0 cancelled
	}{
		{[]string{"99.0"}, 1, "scancel: error: Kill job error on job step id 99.0: Invalid job id specified\n", false},
		{[]string{"-s", "USR1", "99.0"}, 1, "scancel: error: Kill job error on job step id 99.0: Invalid job id specified\n", false},
		{[]string{"10.0"}, 1, "scancel: error: Kill job error on job step id 10.0: Invalid job id specified\n", false},
		{[]string{"-s", "USR1", "10.0"}, 1, "scancel: error: Kill job error on job step id 10.0: Invalid job id specified\n", false},
		{[]string{"12.5"}, 225, "scancel: error: Kill job error on job step id 12: Invalid job id specified\n", false},
		{[]string{"-s", "USR1", "12.5"}, 0, "", false},
		// Step 12.1 has ended while its job runs: as a step it never had.
		{[]string{"12.1"}, 225, "scancel: error: Kill job error on job step id 12: Invalid job id specified\n", false},
		{[]string{"-s", "USR1", "12.1"}, 0, "", false},
		// A pending job (13): nothing said, nothing done.
		{[]string{"13.0"}, 0, "", false},
		{[]string{"-s", "USR1", "13.0"}, 0, "", false},
		{[]string{"12.0"}, 0, "", true},
		{[]string{"-s", "USR1", "12.0"}, 0, "", false},
	} {
		f := fixture()
		f.Steps = []*loomv1.JobStep{
			{Name: "projects/default/jobs/12/steps/0", Job: "projects/default/jobs/12", State: loomv1.JobState_RUNNING},
			{Name: "projects/default/jobs/12/steps/1", Job: "projects/default/jobs/12", State: loomv1.JobState_COMPLETED},
			// Job 10 has ended, its step with it.
			{Name: "projects/default/jobs/10/steps/0", Job: "projects/default/jobs/10", State: loomv1.JobState_COMPLETED},
		}
		code, out, errOut := run(t, f, "scancel", Env{}, tc.args...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v: %d %q %q, want %d %q", tc.args, code, out, errOut, tc.code, tc.errOut)
		}
		if stopped := f.Steps[0].GetState() == loomv1.JobState_CANCELLED; stopped != tc.stopped {
			t.Errorf("scancel %v: step 12.0 cancelled %v, want %v", tc.args, stopped, tc.stopped)
		}
	}
}

// TestScancelBatchFullOfEndedJob: -b to a job that has ended is Slurm's
// "Invalid job id specified", exit 1, as a signal is; -f without -s is a
// cancel, which says nothing for an ended job, exit 0 (Slurm 22.05).
func TestScancelBatchFullOfEndedJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		errOut string
	}{
		{[]string{"-b", "10"}, 1, "scancel: error: Kill job error on job id 10: Invalid job id specified\n"},
		{[]string{"-f", "10"}, 0, ""},
		{[]string{"-f", "-s", "USR1", "10"}, 1, "scancel: error: Kill job error on job id 10: Invalid job id specified\n"},
		{[]string{"-b", "-s", "USR1", "10"}, 1, "scancel: error: Kill job error on job id 10: Invalid job id specified\n"},
	} {
		code, out, errOut := run(t, fixture(), "scancel", Env{}, tc.args...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v: %d %q %q, want %d %q", tc.args, code, out, errOut, tc.code, tc.errOut)
		}
	}
}

// TestScancelStepOfAnotherUser: scancel JOB.STEP of another user's job by
// someone who is not an administrator (the gateway's PermissionDenied)
// answers as Slurm 22.05's did (recorded with scripts/slurm-local.sh, as
// nobody, of root's jobs): "Invalid user id" naming the job alone, exit
// 218 (ESLURM_USER_ID_MISSING), for any step of a running job, with a
// signal too; an ended job's step is unknown to anyone (exit 1) and a
// pending job's says nothing, exit 0.
func TestScancelStepOfAnotherUser(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		errOut string
	}{
		{[]string{"12.0"}, 218, "scancel: error: Kill job error on job step id 12: Invalid user id\n"},
		{[]string{"-s", "USR1", "12.0"}, 218, "scancel: error: Kill job error on job step id 12: Invalid user id\n"},
		{[]string{"12.7"}, 218, "scancel: error: Kill job error on job step id 12: Invalid user id\n"},
		{[]string{"10.0"}, 1, "scancel: error: Kill job error on job step id 10.0: Invalid job id specified\n"},
		{[]string{"13.0"}, 0, ""},
		{[]string{"-s", "USR1", "13.0"}, 0, ""},
	} {
		f := fixture()
		f.StepCancelErr = status.Error(codes.PermissionDenied,
			"Access/permission denied: job 12 is alice's; only its owner or an administrator of its project may act on it")
		code, out, errOut := run(t, f, "scancel", Env{User: "bob"}, tc.args...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v: %d %q %q, want %d %q", tc.args, code, out, errOut, tc.code, tc.errOut)
		}
	}
}

// TestScancelArrayTaskStep: scancel JOB_TASK.STEP acts on a step of one
// array task, as Slurm 22.05's does (recorded with scripts/slurm-local.sh:
// scancel 26_3.0 ended step 0 of task 26_3 alone, exit 0). Its refusals
// name what slurmctld names: a task the array does not have (or a task
// that has ended) the argument, exit 1; a step the running task lacks, or
// another user's task, the task's own job id (here 16, task 15_0), exit
// 225 or 218; -v's line names the task's own id too, and only for a task
// that runs. A step of a task still pending in its array's record: nothing
// said, exit 0. A range of tasks is no step id: "Invalid job id".
func TestScancelArrayTaskStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		user    string
		denied  bool // the gateway refuses the step's cancel
		code    int
		errOut  string
		stopped bool // step 0 of task 15_0 (job 16) cancelled
	}{
		{args: []string{"15_0.0"}, stopped: true},
		{args: []string{"015_00.00"}, stopped: true},
		{args: []string{"-v", "15_0.0"}, errOut: "scancel: Terminating step 16.0\n", stopped: true},
		{args: []string{"-s", "USR1", "15_0.0"}},
		{args: []string{"15_0.7"}, code: 225, errOut: "scancel: error: Kill job error on job step id 16: Invalid job id specified\n"},
		{args: []string{"-v", "15_0.7"}, code: 225,
			errOut: "scancel: Terminating step 16.7\nscancel: error: Kill job error on job step id 16: Invalid job id specified\n"},
		{args: []string{"15_9.0"}, code: 1, errOut: "scancel: error: Kill job error on job step id 15_9.0: Invalid job id specified\n"},
		{args: []string{"-v", "15_9.0"}, code: 1, errOut: "scancel: error: Kill job error on job step id 15_9.0: Invalid job id specified\n"},
		{args: []string{"15_2.0"}},
		{args: []string{"15_0.0"}, user: "bob", denied: true, code: 218, errOut: "scancel: error: Kill job error on job step id 16: Invalid user id\n"},
		{args: []string{"15_[0-1].0"}, code: 1, errOut: "scancel: error: Invalid job id 15_[0-1].0\n"},
		{args: []string{"15_x.0"}, code: 1, errOut: "scancel: error: Invalid job id 15_x.0\n"},
		{args: []string{"15_.0"}, code: 1, errOut: "scancel: error: Invalid job id 15_.0\n"},
	} {
		f := fixture()
		f.Steps = []*loomv1.JobStep{
			{Name: "projects/default/jobs/16/steps/0", Job: "projects/default/jobs/16", State: loomv1.JobState_RUNNING},
		}
		if tc.denied {
			f.StepCancelErr = status.Error(codes.PermissionDenied, "Access/permission denied: job 16 is alice's")
		}
		code, out, errOut := run(t, f, "scancel", Env{User: tc.user}, tc.args...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v: %d %q %q, want %d %q", tc.args, code, out, errOut, tc.code, tc.errOut)
		}
		if stopped := f.Steps[0].GetState() == loomv1.JobState_CANCELLED; stopped != tc.stopped {
			t.Errorf("scancel %v: step 15_0.0 cancelled %v, want %v", tc.args, stopped, tc.stopped)
		}
	}
}
