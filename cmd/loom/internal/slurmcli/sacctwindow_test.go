package slurmcli

import "testing"

// TestSacctStateWindowIsSlurms: sacct -s selects the jobs that were in
// a state during the time window, and the window's defaults change with
// -s, as Slurm 22.05's (man sacct, DEFAULT TIME WINDOW;
// slurmdb_job_cond_def_start_end and as_mysql_jobacct_process.c
// _state_time_string): without -S it is the instant now, so only jobs
// running or pending now are found; -E defaults to -S; an end state is
// one the job ended in inside the window (ends included); RUNNING and
// PENDING are the jobs that ran or waited during it, whatever they are
// now. With -j and no -S there is no window: the state alone.
func TestSacctStateWindowIsSlurms(t *testing.T) {
	t.Parallel()
	// Fixture (now 15:04:05, alice's jobs): 10 ran 13:04:05-14:04:05 and
	// COMPLETED, 11 FAILED at 14:15:05, 12 and 15_0 run since 14:02:02
	// and 15:03:35, 14 and 15_[1-3%2] wait since 12:04:05.
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
		// RUNNING: ran during the window, COMPLETED since.
		{[]string{"-o", "JobID,State", "-s", "R", "-S", "now-3hours", "-E", "now-90minutes"}, "10|COMPLETED\n"},
		// PENDING: waited during the window, started since or not.
		{[]string{"-s", "PD", "-S", "now-1minute", "-E", "now"}, "14\n15_0\n15_[1-3%2]\n"},
		{[]string{"-j", "10", "-s", "CD"}, "10\n"},
	} {
		args := append([]string{"-P", "-n", "-X", "-o", "JobID"}, tc.args...)
		code, out, errOut := run(t, fixture(), "sacct", Env{}, args...)
		if code != 0 || out != tc.want {
			t.Errorf("sacct %v: %d %q %q, want %q", args, code, out, errOut, tc.want)
		}
	}
}
