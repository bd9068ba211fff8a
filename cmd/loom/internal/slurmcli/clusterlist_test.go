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
		{"squeue", "--clusters=all"}, {"sinfo", "-M", "all"}, {"sinfo", "-M", "demo,other"},
		{"sacct", "-M", "demo,other"}, {"scancel", "-M", "demo,other", "12"}, {"scontrol", "-M", "all", "show", "job", "12"},
		{"sprio", "-M", "demo,other"}, {"sshare", "-M", "ALL"},
	} {
		code, out, errOut := run(t, fixture(), tc[0], Env{}, tc[1:]...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, tc[0]+": error: -M ") ||
			!strings.Contains(errOut, "takes one cluster with -M (a list or 'all' is not supported): run it once per cluster\n") && !strings.Contains(errOut, "takes a list of clusters with -M, not 'all'\n") {
			t.Errorf("%v: %d %q %q; want the list refused, exit 1", tc, code, out, errOut)
		}
	}
	// One cluster still works.
	if code, out, errOut := run(t, fixture(), "squeue", Env{}, "-M", "demo", "-h", "-o", "%i", "-j", "12"); code != 0 || out != "12\n" {
		t.Errorf("squeue -M demo: %d %q %q", code, out, errOut)
	}
}

// TestSqueueClusterList: squeue -M a,b lists each cluster in turn, as
// Slurm's _multi_cluster (src/squeue/squeue.c): "CLUSTER: a", its table,
// a blank line, "CLUSTER: b", its table; with -h neither the lines nor the
// headers. A list past 16 clusters is refused by name, exit 1.
func TestSqueueClusterList(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, fixture(), "squeue", Env{}, "-M", "other,demo", "-o", "%i", "-j", "12,20")
	if want := "CLUSTER: other\nJOBID\n20\n\nCLUSTER: demo\nJOBID\n12\n"; code != 0 || out != want {
		t.Errorf("squeue -M other,demo: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, fixture(), "squeue", Env{}, "-M", "demo,other,demo", "-h", "-o", "%i", "-j", "12,20")
	if code != 0 || out != "12\n20\n" {
		t.Errorf("squeue -h -M demo,other,demo: %d %q %q, want 12 then 20", code, out, errOut)
	}
	many := strings.TrimSuffix(strings.Repeat("c,", 16), ",") + ",d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s"
	code, out, errOut = run(t, fixture(), "squeue", Env{}, "-M", many)
	if code != 1 || out != "" || errOut != "squeue: error: -M: at most 16 clusters, got 17\n" {
		t.Errorf("squeue -M (17 clusters): %d %q %q", code, out, errOut)
	}
}
