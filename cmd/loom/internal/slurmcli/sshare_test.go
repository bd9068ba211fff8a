package slurmcli

import (
	"strings"
	"testing"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSshare: Slurm's columns and widths over the scheduler's standing;
// the caller's rows by default, every user with -a, -u and -A filters,
// parsable output, and what Loom does not report.
func TestSshare(t *testing.T) {
	t.Parallel()
	f := fixture()
	f.Shares = []*loomv1.Share{
		{Account: "physics", NormShares: 0.5, RawUsage: 28800.4, EffectiveUsage: 0.8},
		{Account: "physics", User: "alice", NormShares: 0.25, RawUsage: 28800.4, EffectiveUsage: 0.8, FairShare: 0.287175},
		{Account: "physics", User: "bob", NormShares: 0.25, EffectiveUsage: 0, FairShare: 0.574349},
		{Account: "vision", NormShares: 0.5, RawUsage: 7200, EffectiveUsage: 0.2},
		{Account: "vision", User: "carol", NormShares: 0.5, RawUsage: 7200, EffectiveUsage: 0.2, FairShare: 0.659754},
	}
	code, out, errOut := run(t, f, "sshare", Env{})
	want := `             Account       User  RawShares  NormShares    RawUsage  EffectvUsage  FairShare 
-------------------- ---------- ---------- ----------- ----------- ------------- ---------- 
root                                          0.000000       36000      1.000000            
 physics                                 1    0.500000       28800      0.800000            
  physics                 alice          1    0.250000       28800      0.800000   0.287175 
 vision                                  1    0.500000        7200      0.200000            
`
	if code != 0 || out != want {
		t.Fatalf("sshare: exit %d %s\n%s\nwant\n%s", code, errOut, out, want)
	}
	if _, out, _ := run(t, f, "sshare", Env{}, "-a"); !strings.Contains(out, "  physics                   bob          1    0.250000           0      0.000000   0.574349 \n") ||
		!strings.Contains(out, "carol") {
		t.Errorf("sshare -a:\n%s", out)
	}
	if _, out, _ := run(t, f, "sshare", Env{}, "-A", "vision", "-u", "carol", "-P", "-n"); out != "root|||0.000000|36000|1.000000|\n vision||1|0.500000|7200|0.200000|\n  vision|carol|1|0.500000|7200|0.200000|0.659754\n" {
		t.Errorf("sshare -A vision -u carol -P -n: %q", out)
	}
	if _, out, _ := run(t, f, "sshare", Env{}, "-p", "-u", "bob"); !strings.HasPrefix(out, "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|\n") ||
		!strings.Contains(out, "  physics|bob|1|0.250000|0|0.000000|0.574349|\n") {
		t.Errorf("sshare -p -u bob:\n%s", out)
	}
	// A name wider than its column is cut with a '+', as sacct's cells.
	f.Shares = append(f.Shares, &loomv1.Share{Account: "computational-linguistics", User: "alice", NormShares: 1})
	if _, out, _ := run(t, f, "sshare", Env{}, "-A", "computational-linguistics"); !strings.Contains(out, "\n  computational-lin+      alice ") {
		t.Errorf("a long account name:\n%s", out)
	}
	// Sub-accounts: each level one space further in, RawShares as set,
	// root's usage the scheduler's root row's (its subtree's, as each
	// account's).
	f.Shares = []*loomv1.Share{
		{Account: "root", RawShares: 1, NormShares: 1, RawUsage: 100, EffectiveUsage: 1},
		{Account: "science", ParentAccount: "root", RawShares: 3, NormShares: 0.75, RawUsage: 100, EffectiveUsage: 1},
		{Account: "physics", ParentAccount: "science", RawShares: 2, NormShares: 0.75, RawUsage: 100, EffectiveUsage: 1},
		{Account: "physics", User: "alice", RawShares: 5, NormShares: 0.75, FairShare: 1},
	}
	if _, out, _ := run(t, f, "sshare", Env{}, "-P", "-n"); out != "root|||0.000000|100|1.000000|\n science||3|0.750000|100|1.000000|\n  physics||2|0.750000|100|1.000000|\n   physics|alice|5|0.750000|0|0.000000|1.000000\n" {
		t.Errorf("sshare of a tree: %q", out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-l"}, 1, "sshare: error: the long format"},
		{[]string{"--bogus"}, 1, "sshare"},
		{[]string{"extra"}, 1, "Unrecognized option: extra"},
	} {
		if code, _, errOut := run(t, f, "sshare", Env{}, c.args...); code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("sshare %v: exit %d %q, want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if code, _, errOut := run(t, f, "sshare", Env{Cluster: "nope"}); code != 1 || !strings.Contains(errOut, "sshare") {
		t.Errorf("sshare of an unknown cluster: exit %d %q", code, errOut)
	}
}
