package slurmcli

import (
	osuser "os/user"
	"strings"
	"testing"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestIdentityIsNotAVariable: who a Slurm command acts as is the user its
// credential names, else the OS account it runs as; USER and LOOM_USER,
// which anyone can set, change nothing (`USER=root scancel` is still its
// caller). Not parallel: it sets the process's environment.
func TestIdentityIsNotAVariable(t *testing.T) {
	u, err := osuser.Current()
	if err != nil {
		t.Skipf("no account name to compare with: %v", err)
	}
	t.Setenv("USER", "someone-else")
	t.Setenv("LOOM_USER", "root-claimed")
	if got := AccountName(); got != u.Username {
		t.Errorf("AccountName() = %q, want the account %q", got, u.Username)
	}
	env := EnvFromOS(nil, "")
	if env.User != u.Username {
		t.Errorf("EnvFromOS(no principal).User = %q with USER and LOOM_USER set; want the OS account %q", env.User, u.Username)
	}
	if env.Environ["USER"] != "someone-else" {
		t.Errorf("EnvFromOS changed the environment's USER to %q; the job's exported environment keeps it", env.Environ["USER"])
	}
	if env := EnvFromOS(nil, "alice"); env.User != "alice" {
		t.Errorf("EnvFromOS(principal alice).User = %q, want alice", env.User)
	}
	// sbatch names the principal's user as the owner, whatever USER says.
	f := fixture()
	code, _, errOut := run(t, f, "sbatch", Env{User: "alice", Environ: map[string]string{"USER": "root", "LOOM_USER": "root"}},
		"--parsable", "--wrap", "true")
	if code != 0 {
		t.Fatalf("sbatch: exit %d: %s", code, errOut)
	}
	if req, ok := fakegw.LastRequest[*loomv1.SubmitJobRequest](f); !ok || req.GetJob().GetUser() != "alice" {
		t.Errorf("sbatch with USER=root LOOM_USER=root named owner %q; want the principal's alice", req.GetJob().GetUser())
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

// TestScontrolShowsAPendingJobsOutputAsSlurmDoes: the output and error
// files of a job not started yet are shown as Slurm shows them, absolute
// under WorkDir with the job's fields expanded (the node's as written).
func TestScontrolShowsAPendingJobsOutputAsSlurmDoes(t *testing.T) {
	t.Parallel()
	f := fixture()
	for _, j := range f.Jobs {
		if j.GetJobId() == "14" {
			j.OutputPattern, j.ErrorPattern = "logs/%x-%j.out", "/scratch/%u/%A_%a-%N.err"
		}
	}
	code, out, errOut := run(t, f, "scontrol", Env{}, "show", "job", "14")
	if code != 0 || errOut != "" {
		t.Fatalf("scontrol show job 14: exit %d, %q", code, errOut)
	}
	for _, want := range []string{"   StdOut=/home/alice/logs/held-14.out\n", "   StdErr=/scratch/alice/14_4294967294-%N.err\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("scontrol show job 14 lacks %q:\n%s", want, out)
		}
	}
}

// TestInvalidUsersAsSlurm: -u takes what Slurm 22.05 takes. squeue and
// sprio report a user that cannot be one ("Invalid user: X" and an empty
// line on stderr) and go on without it, exit 0, listing nothing when no
// user given is valid; scancel and sacct refuse it (exit 1). A numeric -u
// is the OS account of that uid. A well-formed name that is no OS account
// is a Loom user like any other: no complaint, just no jobs.
func TestInvalidUsersAsSlurm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  string
		args []string
		code int
		out  string // the job ids printed, or "" for the header only
		err  string
	}{
		{"squeue", []string{"-u", "No_Such!"}, 0, "", "squeue: error: Invalid user: No_Such!\n\n"},
		{"squeue", []string{"-u", "bob,No_Such!"}, 0, "13", "squeue: error: Invalid user: No_Such!\n\n"},
		{"squeue", []string{"-u", "4294967294"}, 0, "", "squeue: error: Invalid user: 4294967294\n\n"},
		{"squeue", []string{"-u", "nosuchuser"}, 0, "", ""},
		{"sprio", []string{"-u", "No_Such!"}, 0, "", "sprio: error: Invalid user: No_Such!\n\n"},
		{"scancel", []string{"-u", "No_Such!"}, 1, "", "scancel: error: Invalid user name: No_Such!\n"},
		{"sacct", []string{"-u", "No_Such!"}, 1, "", "sacct: error: Invalid user id: No_Such!\n"},
	} {
		args := tc.args
		if tc.cmd == "squeue" || tc.cmd == "sprio" {
			args = append([]string{"-h", "-o", "%i"}, args...)
		}
		code, out, errOut := run(t, fixture(), tc.cmd, Env{}, args...)
		if code != tc.code || strings.Join(strings.Fields(out), " ") != tc.out || errOut != tc.err {
			t.Errorf("%s %v: exit %d, %q, %q; want %d, %q, %q", tc.cmd, tc.args, code, out, errOut, tc.code, tc.out, tc.err)
		}
	}
	// A uid is its account's name: squeue -u 0 is squeue -u root.
	root, err := osuser.LookupId("0")
	if err != nil {
		t.Skipf("no uid 0 to look up: %v", err)
	}
	f := fixture()
	f.Jobs[4].User = root.Username // job 13
	if code, out, errOut := run(t, f, "squeue", Env{}, "-h", "-o", "%i", "-u", "0"); code != 0 || out != "13\n" || errOut != "" {
		t.Errorf("squeue -u 0: exit %d, %q, %q; want job 13 of %s", code, out, errOut, root.Username)
	}
}
