package slurmcli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSacctStateWindowIsSlurms: sacct -s selects the jobs that were in
// a state during the time window, and the window's defaults change with
// -s, as Slurm 22.05's (man sacct, DEFAULT TIME WINDOW;
// slurmdb_job_cond_def_start_end and as_mysql_jobacct_process.c
// _state_time_string): without -S it is the instant now, so only jobs
// running or pending now are found; -E defaults to -S; an end state is
// one the job ended in inside the window (ends included); RUNNING and
// PENDING are the jobs that ran or waited during it, whatever they are
// now. With -j and no -S the window is the Epoch to now.
func TestSacctStateWindowIsSlurms(t *testing.T) {
	t.Parallel()
	// Fixture (now 15:04:05, alice's jobs): 10 ran 13:04:05-14:04:05 and
	// COMPLETED, 11 FAILED at 14:15:05, 12 and 15_0 run since 14:02:02
	// and 15:03:35, 14 (held) and 15_[1-3%2] (task limit) wait since
	// 12:04:05.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-s", "CD,F"}, ""},
		{[]string{"-s", "R"}, "12\n15_0\n"},
		{[]string{"-s", "CD,F", "-S", "now-2hours", "-E", "now"}, "10\n11\n"},
		// -E defaults to -S: only what ended at that second.
		{[]string{"-s", "CD", "-S", "now-1hours"}, "10\n"},
		{[]string{"-s", "CD", "-S", "now-59minutes"}, ""},
		// RUNNING: ran during the window, COMPLETED since (-o adds State).
		{[]string{"-o", "State", "-s", "R", "-S", "now-3hours", "-E", "now-90minutes"}, "10|COMPLETED\n"},
		// PENDING: waited during the window, started since or not;
		// eligible (time_eligible set) then: not 14, held, nor
		// 15_[1-3%2], waiting on its task limit.
		{[]string{"-s", "PD", "-S", "now-1minute", "-E", "now"}, "15_0\n"},
		{[]string{"-j", "10", "-s", "CD"}, "10\n"},
		// With -j and no -S the window is the Epoch to now (not the
		// state alone): 10 ran, and waited before it, in it; 14, held,
		// was never eligible.
		{[]string{"-j", "10", "-s", "R"}, "10\n"},
		{[]string{"-j", "10,14", "-s", "PD"}, "10\n"},
	} {
		args := append([]string{"-P", "-n", "-X", "-o", "JobID"}, tc.args...)
		code, out, errOut := run(t, fixture(), "sacct", Env{}, args...)
		if code != 0 || out != tc.want {
			t.Errorf("sacct %v: %d %q %q, want %q", args, code, out, errOut, tc.want)
		}
	}
}

// TestSacctWindowIsEligibleTime: without -s and -j, sacct lists the jobs
// eligible before the window's end (-E, else now), as Slurm 22.05's
// accounting query asks (as_mysql_jobacct_process.c: time_eligible <
// E; slurmdb_job_cond_def_start_end makes E now plus one second, so the
// window is [S,E) yet holds now): a job whose --begin is still ahead is
// not listed, nor one held, waiting on a dependency or on its array's
// task limit (Slurm keeps no eligible time for those: scontrol show job's
// EligibleTime=Unknown); a pending one is listed once -E passes its
// submit second, not at it. With -j the submit time is asked instead
// (time_submit < E), so every job named is found.
func TestSacctWindowIsEligibleTime(t *testing.T) {
	t.Parallel()
	f := fixture()
	later := proto.Clone(f.Jobs[4]).(*loomv1.Job) // 13: bob's, pending, submitted 12:04:05
	later.JobId, later.Name, later.User, later.StateReason = "30", "projects/default/jobs/30", "alice", "BeginTime"
	later.BeginTime = timestamppb.New(testNow.Add(time.Hour))
	waits := proto.Clone(later).(*loomv1.Job)
	waits.JobId, waits.Name, waits.StateReason, waits.BeginTime = "31", "projects/default/jobs/31", "Priority", nil
	dep := proto.Clone(waits).(*loomv1.Job)
	dep.JobId, dep.Name, dep.StateReason = "32", "projects/default/jobs/32", "Dependency"
	f.Jobs = append(f.Jobs, later, waits, dep)
	for _, tc := range []struct {
		args []string
		want string
	}{
		// 14 is held, 15_[1-3%2] waits on its task limit, 30 begins
		// at 16:04:05, 32 on a dependency.
		{nil, "10\n11\n12\n15_0\n31\n"},
		{[]string{"-E", "now"}, "10\n11\n12\n15_0\n31\n"},
		{[]string{"-E", "now+2hours"}, "10\n11\n12\n15_0\n30\n31\n"},
		// Submitted (and eligible) at 12:04:05: not before it.
		{[]string{"-S", "2026-01-02T12:00:00", "-E", "2026-01-02T12:04:05"}, ""},
		{[]string{"-S", "2026-01-02T12:00:00", "-E", "2026-01-02T12:04:06"}, "10\n11\n12\n15_0\n31\n"},
		{[]string{"-j", "14,15,30,31,32"}, "14\n15_0\n15_[1-3%2]\n30\n31\n32\n"},
		{[]string{"-j", "30,31", "-E", "2026-01-02T12:04:05"}, ""},
	} {
		args := append([]string{"-P", "-n", "-X", "-o", "JobID"}, tc.args...)
		code, out, errOut := run(t, f, "sacct", Env{}, args...)
		if code != 0 || out != tc.want {
			t.Errorf("sacct %v: %d %q %q, want %q", args, code, out, errOut, tc.want)
		}
	}
	code, out, errOut := run(t, f, "sacct", Env{}, "-P", "-n", "-X", "-o", "JobID,Eligible", "-j", "14,15,30,31")
	want := "14|Unknown\n15_0|2026-01-02T12:04:05\n15_[1-3%2]|Unknown\n30|2026-01-02T16:04:05\n31|2026-01-02T12:04:05\n"
	if code != 0 || out != want {
		t.Errorf("sacct Eligible: %d %q %q, want %q", code, out, errOut, want)
	}
}

// TestArrayRemainderNotEligible: the tasks an array holds back on its
// limit (--array=0-3%1) have no eligible time, as Slurm 22.05's scontrol
// show job said of one beside Loom (JobId=2 ArrayTaskId=1-3%1
// Reason=JobArrayTaskLimit EligibleTime=Unknown, its AccrueTime set),
// while its running task has one.
func TestArrayRemainderNotEligible(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, fixture(), "scontrol", Env{}, "show", "job", "15")
	recs := strings.Split(out, "\n\n")
	if code != 0 || len(recs) < 2 {
		t.Fatalf("scontrol show job 15: %d %q %q, want two records", code, out, errOut)
	}
	for i, wants := range [][]string{
		{"ArrayTaskId=0 ", " EligibleTime=2026-01-02T12:04:05\n"},
		{"ArrayTaskId=1-3%2 ", "Reason=JobArrayTaskLimit ", " EligibleTime=Unknown\n", "AccrueTime=2026-01-02T12:04:05\n"},
	} {
		for _, want := range wants {
			if !strings.Contains(recs[i], want) {
				t.Errorf("scontrol show job 15, record %d: %q, want %q in it", i, recs[i], want)
			}
		}
	}
}

// TestHeldEligibleTime: a hold clears a job's eligible time unless its
// --begin is ahead of the hold, and a release makes it eligible then, as
// slurmctld 22.05 showed beside Loom (scontrol show job's EligibleTime,
// and sacct -c's Eligible): "sbatch -H" and "scontrol hold" of a pending
// job alike said Unknown; "sbatch -H --begin=now+20" kept the begin, and
// still did once it had passed (Loom said Unknown: it judged the begin
// against now, recording no hold time); a hold after the begin had passed
// said Unknown; a release after the begin said the release time (Loom:
// the submit time). Fixture: 14 is pending, submitted 12:04:05 (3h ago).
func TestHeldEligibleTime(t *testing.T) {
	t.Parallel()
	const unset = time.Duration(1) // no such time
	for _, tc := range []struct {
		name           string
		begin, changed time.Duration // from testNow
		hold           bool
		want           string
	}{
		{"held at submit", unset, unset, true, "Unknown"},
		{"held at submit before its --begin", time.Hour, unset, true, "2026-01-02T16:04:05"},
		{"held at submit, its --begin passed since", -time.Minute, unset, true, "2026-01-02T15:03:05"},
		{"held after its --begin", -time.Hour, -time.Minute, true, "Unknown"},
		{"held before its --begin, which passed since", -time.Minute, -time.Hour, true, "2026-01-02T15:03:05"},
		{"released", unset, -time.Minute, false, "2026-01-02T15:03:05"},
		{"released after its --begin", -time.Hour, -time.Minute, false, "2026-01-02T15:03:05"},
		{"released before its --begin", time.Hour, -time.Minute, false, "2026-01-02T16:04:05"},
		{"never held", -time.Hour, unset, false, "2026-01-02T14:04:05"},
	} {
		f := fixture()
		for _, j := range f.Jobs {
			if j.GetJobId() != "14" {
				continue
			}
			j.Hold = tc.hold
			if tc.begin != unset {
				j.BeginTime = timestamppb.New(testNow.Add(tc.begin))
			}
			if tc.changed != unset {
				j.HoldChangeTime = timestamppb.New(testNow.Add(tc.changed))
			}
		}
		code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "14")
		if want := " EligibleTime=" + tc.want + "\n"; code != 0 || !strings.Contains(out, want) {
			t.Errorf("%s: scontrol show job 14: %d %q %q, want %q", tc.name, code, out, errOut, want)
		}
		code, out, errOut = run(t, f, "sacct", Env{}, "-P", "-n", "-X", "-o", "JobID,Eligible", "-j", "14")
		if want := "14|" + tc.want + "\n"; code != 0 || out != want {
			t.Errorf("%s: sacct Eligible: %d %q %q, want %q", tc.name, code, out, errOut, want)
		}
	}
}
