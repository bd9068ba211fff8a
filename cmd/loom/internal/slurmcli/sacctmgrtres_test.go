package slurmcli

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestSacctmgrTRESLimits: GrpTRES= on an account (add and modify, one TRES
// changed and the others kept, -1 clearing one), GrpTRES=, MaxTRESPerJob=
// and MaxWall= on a user's association; show assoc prints them in the
// GrpTRES, MaxTRES and MaxWall columns as Slurm's sacctmgr does. A bad
// value is refused naming the option and the limit, and nothing is sent.
func TestSacctmgrTRESLimits(t *testing.T) {
	t.Parallel()
	g := &fakegw.Gateway{}
	for _, tc := range []struct {
		args          []string
		code          int
		stdout, other string
	}{
		{[]string{"-i", "add", "account", "team-a", "GrpTRES=gres/gpu=64,cpu=512"}, 0,
			" Adding Account(s)\n  team-a\n Settings\n  Description     = team-a\n  Organization    = team-a\n" +
				" Associations\n  A = team-a     C = default   \n Settings\n  Parent        = root\n  GrpTRES       = cpu=512,gres/gpu=64\n", ""},
		{[]string{"-i", "add", "user", "alice", "account=team-a", "MaxTRESPerJob=gres/gpu=16", "MaxWall=24:00:00"}, 0,
			" Adding User(s)\n  alice\n Settings =\n  Default Account = team-a\n Associations =\n  U = alice     A = team-a     C = default   \n" +
				" Non Default Settings\n  MaxTRESPerJob = gres/gpu=16\n  MaxWall       = 1-00:00:00\n", ""},
		{[]string{"modify", "account", "team-a", "set", "GrpTRES=gres/gpu=32,node=4"}, 0,
			" Modified account associations...\n  C = default    A = team-a               of root\n", ""},
		{[]string{"modify", "user", "alice", "set", "GrpTRES=mem=100G", "MaxTRES=node=2"}, 0,
			" Modified user associations...\n  C = default    A = team-a     U = alice    \n", ""},
		{[]string{"-n", "-P", "show", "assoc", "format=account,user,grptres,maxtres,maxwall"}, 0,
			"root||||\nteam-a||cpu=512,node=4,gres/gpu=32||\nteam-a|alice|mem=100G|node=2,gres/gpu=16|1-00:00:00\n", ""},
		{[]string{"-Q", "modify", "account", "team-a", "set", "GrpTRES=cpu=-1"}, 0, "", ""},
		{[]string{"-Q", "modify", "user", "alice", "set", "MaxTRESPerJob=gres/gpu=-1", "MaxWall=-1"}, 0, "", ""},
		{[]string{"-n", "-P", "show", "assoc", "format=account,user,grptres,maxtres,maxwall"}, 0,
			"root||||\nteam-a||node=4,gres/gpu=32||\nteam-a|alice|mem=100G|node=2|\n", ""},
		{[]string{"modify", "account", "team-a", "set", "GrpTRES=gres/gpu=2000000000"}, 1, "",
			" Bad GrpTRES value: gres/gpu=2000000000: 2000000000 is outside 0..1073741824 (the limit), or -1 to clear it\n"},
		{[]string{"modify", "user", "alice", "set", "MaxTRES=billing=3"}, 1, "",
			" Bad MaxTRESPerJob value: billing=3: Loom limits only cpu, mem, node, gres/gpu\n"},
		{[]string{"modify", "user", "alice", "set", "MaxWall=soon"}, 1, "",
			" Bad MaxWall time format: soon: \"soon\" is not a time ([days-]hours:minutes:seconds, minutes, or -1 to clear it): " + mustTimeErr("soon") + "\n"},
		// A limit of 0 is one (Slurm's way to freeze an account), shown
		// as gres/gpu=0; -1 still clears it.
		{[]string{"-Q", "modify", "user", "alice", "set", "GrpTRES=gres/gpu=0"}, 0, "", ""},
		{[]string{"-Q", "modify", "account", "team-a", "set", "GrpTRES=gres/gpu=0,node=-1"}, 0, "", ""},
		{[]string{"-i", "add", "account", "frozen", "GrpTRES=cpu=0"}, 0,
			" Adding Account(s)\n  frozen\n Settings\n  Description     = frozen\n  Organization    = frozen\n" +
				" Associations\n  A = frozen     C = default   \n Settings\n  Parent        = root\n  GrpTRES       = cpu=0\n", ""},
		{[]string{"-n", "-P", "show", "assoc", "format=account,user,grptres,maxtres,maxwall"}, 0,
			"root||||\nfrozen||cpu=0||\nteam-a||gres/gpu=0||\nteam-a|alice|mem=100G,gres/gpu=0|node=2|\n", ""},
		// MaxWall=0 is a limit too (no job runs), shown as Slurm shows
		// it; -1 clears it.
		{[]string{"-i", "modify", "user", "alice", "set", "MaxWall=0"}, 0,
			" Modified user associations...\n  C = default    A = team-a     U = alice    \n", ""},
		{[]string{"-n", "-P", "show", "assoc", "user=alice", "format=account,user,maxwall"}, 0, "team-a|alice|00:00:00\n", ""},
		{[]string{"-Q", "modify", "user", "alice", "set", "MaxWall=-1"}, 0, "", ""},
		{[]string{"-n", "-P", "show", "assoc", "user=alice", "format=account,user,maxwall"}, 0, "team-a|alice|\n", ""},
	} {
		code, out, errOut := run(t, g, "sacctmgr", Env{}, tc.args...)
		if code != tc.code || out != tc.stdout || errOut != tc.other {
			t.Errorf("sacctmgr %q: exit %d, stdout\n%s\nstderr\n%s\nwant exit %d, stdout\n%s\nstderr\n%s", tc.args, code, out, errOut, tc.code, tc.stdout, tc.other)
		}
	}
	for _, a := range g.Associations {
		if a.GetUser() == "alice" && (!proto.Equal(a.GetGrpTres(), &loomv1.Tres{MemMb: proto.Int64(100 << 10), Gpu: proto.Int64(0)}) ||
			!proto.Equal(a.GetMaxTresPerJob(), &loomv1.Tres{Node: proto.Int64(2)}) || a.MaxWallMinutes != nil) {
			t.Errorf("alice's association after the refusals and gres/gpu=0: %v", a)
		}
	}
}

func mustTimeErr(s string) string {
	_, _, err := ParseTimeLimit(s)
	return err.Error()
}
