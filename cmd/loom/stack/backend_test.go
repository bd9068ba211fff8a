package stack

import "testing"

// TestSchedulerBackend checks that the gateway is told the backend the
// scheduler reads from its own flags, however they are written, so that
// the two cannot disagree in a stack.
func TestSchedulerBackend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-backend=slurm", "-slurm-url=http://127.0.0.1:6820"}, "slurm"},
		{[]string{"--backend", "slurm"}, "slurm"},
		{[]string{"-backend=slurm", "-backend=builtin"}, "builtin"}, // the last wins, as for the scheduler
		{[]string{"-no-such-flag"}, "builtin"},
	} {
		if got := schedulerBackend(tc.args); got != tc.want {
			t.Errorf("schedulerBackend(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
