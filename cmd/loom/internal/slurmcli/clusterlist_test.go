package slurmcli

import (
	"strings"
	"testing"
)

// TestClusterListRefused: -M with Slurm's list ("a,b") or "all" is refused
// by name, exit 1, by every command that reads -M, instead of being looked
// up as one cluster named "a,b" ("cluster projects/P/clusters/a,b: not
// found").
func TestClusterListRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range [][]string{
		{"squeue", "-M", "demo,other"}, {"squeue", "--clusters=all"}, {"sinfo", "-M", "all"}, {"sinfo", "-M", "demo,other"},
		{"sacct", "-M", "demo,other"}, {"scancel", "-M", "demo,other", "12"}, {"scontrol", "-M", "all", "show", "job", "12"},
		{"sprio", "-M", "demo,other"}, {"sshare", "-M", "ALL"},
	} {
		code, out, errOut := run(t, fixture(), tc[0], Env{}, tc[1:]...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, tc[0]+": error: -M ") ||
			!strings.Contains(errOut, "takes one cluster with -M (a list or 'all' is not supported): run it once per cluster\n") {
			t.Errorf("%v: %d %q %q; want the list refused, exit 1", tc, code, out, errOut)
		}
	}
	// One cluster still works.
	if code, out, errOut := run(t, fixture(), "squeue", Env{}, "-M", "demo", "-h", "-o", "%i", "-j", "12"); code != 0 || out != "12\n" {
		t.Errorf("squeue -M demo: %d %q %q", code, out, errOut)
	}
}
