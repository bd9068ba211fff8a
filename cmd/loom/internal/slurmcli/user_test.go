package slurmcli

import (
	osuser "os/user"
	"strings"
	"testing"
)

func TestUserName(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got := UserName(env(map[string]string{"LOOM_USER": "alice", "USER": "root"})); got != "alice" {
		t.Errorf("UserName with LOOM_USER = %q, want alice", got)
	}
	if got := UserName(env(map[string]string{"USER": "bob"})); got != "bob" {
		t.Errorf("UserName with USER = %q, want bob", got)
	}
	// Neither: the account this test runs as, which has a name here.
	u, err := osuser.Current()
	if err != nil {
		t.Skipf("no account name to compare with: %v", err)
	}
	if got := UserName(env(nil)); got == "" || got != u.Username {
		t.Errorf("UserName without LOOM_USER or USER = %q, want the account %q", got, u.Username)
	}
}

func TestScontrolShowsAPendingJobAsSlurmDoes(t *testing.T) {
	t.Parallel()
	// Job 14 is held: not eligible, so no eligible or accrue time, and no
	// nodes (Slurm 22.05 prints NodeList= empty, not (null)).
	code, out, errOut := run(t, fixture(), "scontrol", Env{}, "show", "job", "14")
	if code != 0 || errOut != "" {
		t.Fatalf("scontrol show job 14: exit %d, %q", code, errOut)
	}
	for _, want := range []string{"EligibleTime=Unknown\n", "   AccrueTime=Unknown\n", "   NodeList=\n", "   UserId=alice GroupId=alice "} {
		if !strings.Contains(out, want) {
			t.Errorf("scontrol show job 14 lacks %q:\n%s", want, out)
		}
	}
	// Its record ends as Slurm's: an empty line, or a trailing space on one line.
	if !strings.HasSuffix(out, "   Power=\n   \n\n") {
		t.Errorf("scontrol show job 14 ends %q", out[max(0, len(out)-30):])
	}
	if _, one, _ := run(t, fixture(), "scontrol", Env{}, "-o", "show", "job", "14"); !strings.HasSuffix(one, " Power= \n") || strings.Count(one, "\n") != 1 {
		t.Errorf("scontrol -o show job 14 = %q", one)
	}
}

func TestAccountIDs(t *testing.T) {
	t.Parallel()
	if uid, gid := accountIDs("no-such-account-here"); uid != "no-such-account-here" || gid != uid {
		t.Errorf("accountIDs of a name that is no account = %q, %q; want the name for both", uid, gid)
	}
	root, err := osuser.Lookup("root")
	if err != nil {
		t.Skipf("no root account to look up: %v", err)
	}
	if uid, gid := accountIDs("root"); uid != "root("+root.Uid+")" || !strings.HasSuffix(gid, "("+root.Gid+")") {
		t.Errorf("accountIDs(root) = %q, %q; want root(%s) and group(%s)", uid, gid, root.Uid, root.Gid)
	}
}
