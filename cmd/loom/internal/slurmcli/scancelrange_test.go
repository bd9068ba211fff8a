package slurmcli

import (
	"testing"
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
