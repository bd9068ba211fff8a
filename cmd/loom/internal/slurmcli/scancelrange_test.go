package slurmcli

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestScancelTaskRange: a range of an array's tasks ("15_[0-2]") is one
// request to Slurm 22.05's scancel (recorded with scripts/slurm-local.sh:
// nobody cancelling root's pending tasks): refused once, naming the
// range, exit 210, not once per task; -v names the range once. Tasks of
// the range the array does not have are skipped silently, exit 0.
func TestScancelTaskRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		user   string
		code   int
		errOut string
	}{
		{[]string{"15_[0-2]"}, "bob", 210, "scancel: error: Kill job error on job id 15_[0-2]: Access/permission denied\n"},
		{[]string{"15_[1-2]", "15_3"}, "bob", 210, "scancel: error: Kill job error on job id 15_[1-2]: Access/permission denied\n" +
			"scancel: error: Kill job error on job id 15_3: Access/permission denied\n"},
		{[]string{"-v", "15_[1-2]"}, "alice", 0, "scancel: Terminating job 15_[1-2]\n"},
		{[]string{"15_[2-9]"}, "alice", 0, ""},
	} {
		f := fixture()
		f.DenyOthers = true
		code, out, errOut := run(t, f, "scancel", Env{User: tc.user}, tc.args...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v (as %s): %d %q %q, want %d %q", tc.args, tc.user, code, out, errOut, tc.code, tc.errOut)
		}
	}
}

// TestScancelSignalPendingRecord: a signal to tasks still pending in their
// array's record is refused once for the whole record, named as squeue
// names it, as Slurm 22.05's scancel answered beside Loom (array 40 of
// 0-5%2 held: "scancel -s USR1 40_[1-2]", "40_3" and "40_3 40_[4-5]" each
// said "Kill job error on job id 40_[0-5%2]: Job can not be altered now,
// try again later" once, exit 228; for "39_[1-3,9]" the task the array
// lacks first, then the record; -v's "Signal 10 to job 39_[0-7]" names
// the record and the signal's number). Fixture: array 15 (0-3%2), task 0
// running (job 16), 1-3 pending in the record.
func TestScancelSignalPendingRecord(t *testing.T) {
	t.Parallel()
	const rec = "scancel: error: Kill job error on job id 15_[1-3%2]: Job can not be altered now, try again later\n"
	for _, tc := range []struct {
		args   []string
		code   int
		errOut string
	}{
		{[]string{"-s", "USR1", "15_[1-2]"}, 228, rec},
		{[]string{"-s", "USR1", "15_3"}, 228, rec},
		{[]string{"-s", "USR1", "15_[1-2]", "15_3"}, 228, rec},
		// The running task is refused with the record, after it (Slurm
		// 22.05, 34_[1-2] with task 1 running: the record, then 34_1).
		{[]string{"-s", "USR1", "15_[0-1]"}, 228, rec + "scancel: error: Kill job error on job id 15_0: Job can not be altered now, try again later\n"},
		{[]string{"-s", "USR1", "15_0"}, 228, "scancel: error: Kill job error on job id 15_0: Job can not be altered now, try again later\n"},
		{[]string{"-s", "USR1", "15_[3-4]"}, 228, "scancel: error: Kill job error on job id 15_4: Invalid job id specified\n" + rec},
		{[]string{"-s", "USR1", "99", "15_2", "13"}, 228, "scancel: error: Kill job error on job id 99: Invalid job id specified\n" + rec +
			"scancel: error: Kill job error on job id 13: Job can not be altered now, try again later\n"},
		{[]string{"-v", "-s", "USR1", "15_[1-2]"}, 228, "scancel: Signal 10 to job 15_[1-3%2]\n" + rec},
		{[]string{"-v", "-s", "USR1", "13"}, 228, "scancel: Signal 10 to job 13\n" +
			"scancel: error: Kill job error on job id 13: Job can not be altered now, try again later\n"},
		{[]string{"-Q", "-s", "USR1", "15_[1-2]"}, 228, ""},
		// Cancelling them is no refusal: -v names the range, as before.
		{[]string{"-v", "15_[1-2]"}, 0, "scancel: Terminating job 15_[1-2]\n"},
	} {
		code, out, errOut := run(t, fixture(), "scancel", Env{}, tc.args...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v: %d %q %q, want %d %q", tc.args, code, out, errOut, tc.code, tc.errOut)
		}
	}
}

// TestScancelSignalWholeArrayPending: a signal to a whole array (its bare
// id) while some of its tasks are still pending in its record is refused
// for every part of it, as Slurm 22.05's scancel answered beside Loom
// (array 25 of 1-5%1, task 1 running: "scancel -s USR1 25" said "Kill
// job error on job id 25_1: Job can not be altered now, try again later"
// and the same for 25_[2-5%1], exit 228): the gateway refuses it, and
// scancel says so for every part.
// Fixture: array 15 (0-3%2), task 0 running (job 16), 1-3 pending in the
// record.
func TestScancelSignalWholeArrayPending(t *testing.T) {
	t.Parallel()
	const (
		task0 = "scancel: error: Kill job error on job id 15_0: Job can not be altered now, try again later\n"
		rec   = "scancel: error: Kill job error on job id 15_[1-3%2]: Job can not be altered now, try again later\n"
	)
	for _, tc := range []struct {
		args   []string
		errOut string
	}{
		{[]string{"-s", "USR1", "15"}, task0 + rec},
		{[]string{"-v", "-s", "USR1", "15"}, "scancel: Signal 10 to job 15_[1-3%2]\nscancel: Signal 10 to job 15_0\n" + task0 + rec},
		{[]string{"-Q", "-s", "USR1", "15"}, ""},
	} {
		f := fixture()
		code, out, errOut := run(t, f, "scancel", Env{}, tc.args...)
		if code != 228 || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v: %d %q %q, want 228 %q", tc.args, code, out, errOut, tc.errOut)
		}
		// One request, for the array: the gateway refuses it (and
		// signals nothing: TestSignalArrayWithPendingTasks in the
		// gateway); scancel says what the gateway's answer names.
		if rs := fakegw.Requests[*loomv1.CancelJobRequest](f); len(rs) != 1 || rs[0].GetName() != "projects/default/jobs/15" {
			t.Errorf("scancel %v sent %v, want one cancel request, for the array", tc.args, rs)
		}
	}
}

// TestScancelSignalWholeArrayLastPending: a signal to a whole array whose
// only task still waiting is its last: slurmctld 22.05 signalled the
// running tasks and refused the waiting one, a job of its own ("scancel
// -s USR1 23", 23_0 and 23_1 running: "Kill job error on job id 23_2: Job
// can not be altered now, try again later", exit 228); a plain scancel
// cancelled them all, saying nothing, exit 0. Loom's scancel said nothing
// for the signal, exit 0. Fixture: array 15 (0-3%2) with tasks 0-2
// running, 3 pending.
func TestScancelSignalWholeArrayLastPending(t *testing.T) {
	t.Parallel()
	const refusal = "scancel: error: Kill job error on job id 15_3: Job can not be altered now, try again later\n"
	for _, tc := range []struct {
		args   []string
		code   int
		errOut string
	}{
		{[]string{"-s", "USR1", "15"}, 228, refusal},
		{[]string{"-Q", "-s", "USR1", "15"}, 228, ""},
		{[]string{"15"}, 0, ""},
	} {
		f := fixture()
		var task0 *loomv1.Job
		for _, j := range f.Jobs {
			if j.GetJobId() == "16" {
				task0 = j
			}
		}
		for i, id := range []string{"17", "18"} {
			task := proto.Clone(task0).(*loomv1.Job)
			task.Name, task.JobId, task.ArrayTaskId = "projects/default/jobs/"+id, id, int32(i+1)
			f.Jobs = append(f.Jobs, task)
		}
		code, out, errOut := run(t, f, "scancel", Env{}, tc.args...)
		if code != tc.code || out != "" || errOut != tc.errOut {
			t.Errorf("scancel %v: %d %q %q, want %d %q", tc.args, code, out, errOut, tc.code, tc.errOut)
		}
		// One request, for the array: the running tasks take the signal.
		if rs := fakegw.Requests[*loomv1.CancelJobRequest](f); len(rs) != 1 || rs[0].GetName() != "projects/default/jobs/15" {
			t.Errorf("scancel %v sent %v, want one cancel request, for the array", tc.args, rs)
		}
	}
}
