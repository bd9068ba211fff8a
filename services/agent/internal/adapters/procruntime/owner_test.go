package procruntime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/stall"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// A "#!" script (handed over as a memfd) and an argv both run as the
// spec's user, and OpenOutput makes the user's files, 0600, in the user's
// new directories, 0700. The same under the shim.
func TestStartAsUser(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		testStartAsUser(t, New(Options{Node: "n1"}))
	})
	t.Run("shim", func(t *testing.T) {
		t.Parallel()
		testStartAsUser(t, New(Options{Node: "n1", StateDir: t.TempDir()}))
	})
}

func testStartAsUser(t *testing.T, rt Runtime) {
	u := testkit.OSUsers(t, 1)[0]
	base := testkit.ReachableDir(t)
	own := filepath.Join(base, "own")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	for i, spec := range []ports.Spec{
		{Script: "#!/bin/sh\nid -u\n"},
		{Argv: []string{"id", "-u"}, Env: []string{"PATH=/usr/bin:/bin"}},
	} {
		path := filepath.Join(own, "d"+strconv.Itoa(i), "out")
		f, err := rt.OpenOutput(u.Name, path, false)
		if err != nil {
			t.Fatal(err)
		}
		spec.User, spec.Dir, spec.Stdout, spec.Stderr, spec.Name = u.Name, own, f, f, "unit-"+strconv.Itoa(i)
		p := start(t, rt, spec)
		f.Close()
		if e := waitExit(t, p); e.Code != 0 {
			t.Fatalf("spec %d exited %+v", i, e)
		}
		if got := strings.TrimSpace(read(t, path)); got != strconv.Itoa(int(u.UID)) {
			t.Fatalf("spec %d ran as uid %q, want %d", i, got, u.UID)
		}
		fi, _ := os.Stat(path)
		di, _ := os.Stat(filepath.Dir(path))
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != u.UID || fi.Mode().Perm() != 0o600 {
			t.Fatalf("output: uid %d mode %v, want the user's, 0600", st.Uid, fi.Mode())
		}
		if st := di.Sys().(*syscall.Stat_t); st.Uid != u.UID || di.Mode().Perm() != 0o700 {
			t.Fatalf("output dir: uid %d mode %v, want the user's, 0700", st.Uid, di.Mode())
		}
	}
	// A directory only root may enter: the start fails (chdir as the user).
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Start(ports.Spec{Argv: []string{"/bin/true"}, User: u.Name, Dir: private, Name: "private"}); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("start in root's 0700 dir as %s: %v, want permission denied", u.Name, err)
	}
	// A program only root may run is the user's execve error, as under
	// Slurm: the task exits 13 (EACCES) saying so.
	prog := filepath.Join(private, "prog")
	testkit.WriteExecutable(t, prog, []byte("#!/bin/sh\n"), 0o700)
	errPath := filepath.Join(own, "prog.err")
	f, err := rt.OpenOutput(u.Name, errPath, false)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, rt, ports.Spec{Argv: []string{prog}, User: u.Name, Dir: own, Name: "prog", Stdout: f, Stderr: f})
	f.Close()
	if e := waitExit(t, p); e.Code != 13 {
		t.Fatalf("root's 0700 program as %s: exit %+v, want 13 (permission denied)", u.Name, e)
	}
	if got, want := read(t, errPath), "slurmstepd-n1: error: execve(): "+prog+": Permission denied\n"; got != want {
		t.Fatalf("root's 0700 program as %s: error output %q, want %q", u.Name, got, want)
	}
}

// Account: who may run here, and why not.
func TestAccountRefusals(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the runtime refuses root jobs only when the agent runs as root")
	}
	strict, lax := New(Options{Node: "n1"}), New(Options{Node: "n1", AllowRoot: true})
	if _, err := strict.Account("nosuchuser-q9"); err == nil || err.Error() != "user nosuchuser-q9 has no account on node n1" {
		t.Fatalf("unknown user: %v", err)
	}
	for _, user := range []string{"root", ""} {
		if _, err := strict.Account(user); err == nil || !strings.Contains(err.Error(), "node n1 does not run jobs as root") {
			t.Fatalf("Account(%q) without AllowRoot: %v, want refused", user, err)
		}
		if _, err := strict.OpenOutput(user, filepath.Join(t.TempDir(), "x"), false); err == nil {
			t.Fatalf("OpenOutput(%q) without AllowRoot succeeded", user)
		}
		if _, err := strict.Start(ports.Spec{Argv: []string{"/bin/true"}, User: user, Dir: "/"}); err == nil {
			t.Fatalf("Start(%q) without AllowRoot succeeded", user)
		}
		if a, err := lax.Account(user); err != nil || a.UID != 0 {
			t.Fatalf("Account(%q) with AllowRoot: %+v, %v", user, a, err)
		}
	}
}

// TestMain doubles as a child that runs as another user: with
// LOOM_TEST_ACCOUNTS set it prints, for each name in it, what Account says
// in a process that is not root (TestNonRootAgentRunsOnlyItsOwnUsersJobs).
func TestMain(m *testing.M) {
	stall.Main() // the process whose reads block, of TestAdoptIsNotHeldUpByAStalledProcess and TestUsageIsNotHeldUpByAStalledProcess
	if pgid, ok := os.LookupEnv("LOOM_TEST_SETPGID"); ok {
		// A job that tries to move itself into another job's process
		// group (TestJobCannotJoinAnotherJobsGroup).
		n, _ := strconv.Atoi(pgid)
		if err := syscall.Setpgid(0, n); err != nil {
			fmt.Printf("refused: %v\n", err)
		} else {
			fmt.Printf("joined %d\n", n)
		}
		os.Exit(0)
	}
	if names, ok := os.LookupEnv("LOOM_TEST_ACCOUNTS"); ok {
		rt := New(Options{Node: "n1", AllowRoot: true})
		for _, name := range strings.Split(names, ",") {
			_, err := rt.Account(name)
			fmt.Printf("%s=%v\n", name, err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// An agent that does not run as root runs its own user's jobs (and jobs
// with no owner, as itself) and refuses every other user's with a reason.
func TestNonRootAgentRunsOnlyItsOwnUsersJobs(t *testing.T) {
	t.Parallel()
	us := testkit.OSUsers(t, 2)
	a, b := us[0], us[1]
	// This test binary, where user a may run it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(testkit.ReachableDir(t), "procruntime.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteExecutable(t, bin, data, 0o755)
	c := exec.Command(bin)
	c.Env = []string{"LOOM_TEST_ACCOUNTS=" + a.Name + "," + b.Name + ",root,"}
	c.Dir = "/"
	c.SysProcAttr = &syscall.SysProcAttr{Credential: a.Credential()}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("child as %s: %v: %s", a.Name, err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	if got[a.Name] != "<nil>" || got[""] != "<nil>" {
		t.Errorf("a non-root agent of %s refused its own user's jobs: %q", a.Name, out)
	}
	for _, other := range []string{b.Name, "root"} {
		if !strings.Contains(got[other], "not root, and runs only that user's jobs, not "+other+"'s") {
			t.Errorf("a non-root agent of %s on %s's job: %q, want refused with the reason", a.Name, other, got[other])
		}
	}
}

// A job may not move its processes into another job's process group: each
// unit leads a session of its own, and setpgid joins only a group of the
// caller's session. In the agent's session a job of user a could join user
// b's running job's group (or the agent's), where b's memory accounting
// counted a's memory (and its -mem limit killed b's job for it), b's
// signals and stops reached a, and an agent restarting killed b's group
// for a process carrying a's LOOM_STEP_ID.
func TestJobCannotJoinAnotherJobsGroup(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		testJobCannotJoinAnotherJobsGroup(t, New(Options{Node: "n1"}))
	})
	t.Run("shim", func(t *testing.T) {
		t.Parallel()
		testJobCannotJoinAnotherJobsGroup(t, New(Options{Node: "n1", StateDir: t.TempDir()}))
	})
}

func testJobCannotJoinAnotherJobsGroup(t *testing.T, rt Runtime) {
	us := testkit.OSUsers(t, 2)
	a, b := us[0], us[1]
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(testkit.ReachableDir(t), "procruntime.test")
	testkit.WriteExecutable(t, bin, data, 0o755)
	victim := start(t, rt, ports.Spec{Argv: []string{"/bin/sleep", "600"}, User: b.Name, Dir: "/", Name: "victim"})
	stdout, stderr := outputs(t, t.TempDir())
	for _, target := range []int{victim.Group().PID, syscall.Getpgrp()} {
		p := start(t, rt, ports.Spec{Argv: []string{bin}, Env: []string{"LOOM_TEST_SETPGID=" + strconv.Itoa(target)},
			User: a.Name, Dir: "/", Name: "attacker-" + strconv.Itoa(target), Stdout: stdout, Stderr: stderr})
		if e := waitExit(t, p); e.Code != 0 {
			t.Fatalf("attacker exited %+v: %s", e, read(t, stderr.Name()))
		}
	}
	got := read(t, stdout.Name())
	if strings.Contains(got, "joined") || strings.Count(got, "refused: operation not permitted") != 2 {
		t.Fatalf("%s's job moving into %s's job's group (%d), then the agent's (%d): %q, want both refused",
			a.Name, b.Name, victim.Group().PID, syscall.Getpgrp(), got)
	}
}

// TestAdoptReadsOnlyTheOwnersProcesses: a restarted agent looks for a
// step's processes among its owner's alone, so that another user's
// process, whose environment read it could stall (its memory map lock
// held), is not read: a process of another user carrying the step's
// marker is not adopted for the agent's own user's step, nor the agent's
// own for that user's step. The uid recorded when the step started
// decides without the owner's name, which may no longer resolve (the
// account removed): only that uid's process is adopted. An owner not
// recorded (nil), or a name that no longer resolves with no uid recorded
// (a record from an older agent), reads every process's, as before.
func TestAdoptReadsOnlyTheOwnersProcesses(t *testing.T) {
	t.Parallel()
	u := testkit.OSUsers(t, 1)[0]
	dir := testkit.ReachableDir(t)
	marker := "LOOM_STEP_ID=" + t.Name() + "#" + strconv.Itoa(os.Getpid())
	rt := New(asAgent)
	run := func(user string) ports.Group {
		f, err := os.Create(filepath.Join(dir, "out-"+user)) // handed to the process open
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return start(t, rt, ports.Spec{Argv: []string{"sleep", "60"}, Env: []string{"PATH=/usr/bin:/bin", marker},
			User: user, Dir: dir, Stdout: f, Stderr: f}).Group()
	}
	mine, theirs := run(""), run(u.Name)

	rt2 := New(asAgent) // the new agent: it started nothing
	self := ""
	if got := rt2.Adopt(marker, nil, &self); !slices.Equal(got, []ports.Group{mine}) {
		t.Fatalf("Adopt for the agent's own user = %+v, want only %+v (not %+v, %s's)", got, mine, theirs, u.Name)
	}
	if got := rt2.Adopt(marker, nil, &u.Name); !slices.Equal(got, []ports.Group{theirs}) {
		t.Fatalf("Adopt for %s = %+v, want only %+v", u.Name, got, theirs)
	}
	if got := rt2.Adopt(marker, nil, nil); len(got) != 2 {
		t.Fatalf("Adopt for an owner not recorded = %+v, want both %+v and %+v", got, mine, theirs)
	}
	gone := "ltgone" + strconv.Itoa(os.Getpid()) // no account has it
	if got := rt2.Adopt(marker, &u.UID, &gone); !slices.Equal(got, []ports.Group{theirs}) {
		t.Fatalf("Adopt for uid %d, its owner's name %s gone = %+v, want only %+v", u.UID, gone, got, theirs)
	}
	self0 := osuser.Self().UID
	if got := rt2.Adopt(marker, &self0, &u.Name); !slices.Equal(got, []ports.Group{mine}) {
		t.Fatalf("Adopt for uid %d (the name %s another's) = %+v, want only %+v: the recorded uid decides", self0, u.Name, got, mine)
	}
	if got := rt2.Adopt(marker, nil, &gone); len(got) != 2 {
		t.Fatalf("Adopt for an owner gone, no uid recorded = %+v, want both %+v and %+v", got, mine, theirs)
	}
}
