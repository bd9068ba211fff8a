package proc

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit/need"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LOOM_PROC_TEST=" + t.Name()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = KillGroup(pid, syscall.SIGKILL) })
	done := make(chan *os.ProcessState, 1)
	go func() { _ = cmd.Wait(); done <- cmd.ProcessState }()

	start, ok := StartTime(pid)
	if !ok || !Alive(pid, start) || !GroupAlive(pid) {
		t.Fatalf("started process not seen alive: start=%d ok=%v", start, ok)
	}
	if hasProc && Alive(pid, start+1) {
		t.Fatal("a different start time matched")
	}
	if hasProc {
		found := FindByEnv("LOOM_PROC_TEST=" + t.Name())
		if len(found) == 0 || found[0] != pid && (len(found) < 2 || found[1] != pid) {
			t.Fatalf("FindByEnv = %v, want it to include %d", found, pid)
		}
	}
	if err := KillGroup(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ps *os.ProcessState
	select {
	case ps = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("process did not exit on SIGTERM")
	}
	if code, sig := ExitCode(ps); code != 128+int32(syscall.SIGTERM) || sig == "" {
		t.Fatalf("ExitCode = %d %q", code, sig)
	}
	if !WaitGone(5*time.Second, func() bool { return !GroupAlive(pid) }) {
		t.Fatal("group still alive after SIGTERM")
	}
	if Alive(pid, start) {
		t.Fatal("reaped process seen alive")
	}
	if err := KillGroup(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("killing a gone group: %v", err)
	}
	if KillGroup(1, syscall.SIGTERM) == nil || KillGroup(0, syscall.SIGTERM) == nil {
		t.Fatal("KillGroup accepted pgid <= 1")
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("/bin/sh", "-c", "exit 3")
	_ = cmd.Run()
	if code, sig := ExitCode(cmd.ProcessState); code != 3 || sig != "" {
		t.Fatalf("ExitCode = %d %q", code, sig)
	}
}

func TestParent(t *testing.T) {
	t.Parallel()
	if got := Parent(os.Getpid()); got != os.Getppid() {
		t.Errorf("Parent(self) = %d, want %d", got, os.Getppid())
	}
	if got := Parent(-1); got != 0 {
		t.Errorf("Parent(-1) = %d, want 0", got)
	}
}

// TestHasEnvRightAfterStart: a process is found by its environment as soon
// as exec.Cmd.Start returns. Start returns once execve has closed the
// close-on-exec descriptors, but the kernel sets the new image's
// environment bounds later in the same execve: read in between,
// /proc/<pid>/environ is empty (CI caught `loom up` missing a node agent
// so, several percent of reads under load).
func TestHasEnvRightAfterStart(t *testing.T) {
	t.Parallel()
	if !hasProc {
		t.Skip("no /proc")
	}
	kv := "LOOM_PROC_TEST=" + t.Name()
	for i := range 300 {
		c := exec.Command("sleep", "5")
		c.Env = []string{kv}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		found := HasEnv(c.Process.Pid, kv)
		_ = c.Process.Kill()
		_ = c.Wait()
		if !found {
			t.Fatalf("start %d: HasEnv(%d, %q) = false right after Start", i, c.Process.Pid, kv)
		}
	}
}

// TestFindByEnvOfPassesOverOtherUsers: FindByEnvOf finds a process of its
// uid carrying the entry, and passes over one of another uid carrying the
// same entry without reading its environment (whose read that process
// could stall): the other uid's process is found only when its own uid is
// asked for. Needs root, to start a process as another uid.
func TestFindByEnvOfPassesOverOtherUsers(t *testing.T) {
	t.Parallel()
	if !hasProc || os.Geteuid() != 0 {
		t.Skip("needs /proc and root (to start a process as another uid)")
	}
	const other = 65534 // nobody's, whether or not this host names it
	kv := "LOOM_PROC_TEST=" + t.Name()
	start := func(uid uint32) int {
		cmd := exec.Command("/bin/sleep", "60")
		cmd.Env = []string{"PATH=/usr/bin:/bin", kv}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() { _ = KillGroup(pid, syscall.SIGKILL); _ = cmd.Wait() })
		return pid
	}
	mine, theirs := start(uint32(os.Geteuid())), start(other)
	if got := FindByEnvOf(kv, uint32(os.Geteuid())); !slices.Equal(got, []int{mine}) {
		t.Fatalf("FindByEnvOf(uid %d) = %v, want only %d (not %d, uid %d's)", os.Geteuid(), got, mine, theirs, other)
	}
	if got := FindByEnvOf(kv, other); !slices.Equal(got, []int{theirs}) {
		t.Fatalf("FindByEnvOf(uid %d) = %v, want only %d", other, got, theirs)
	}
	if got := FindByEnv(kv); !slices.Contains(got, mine) || !slices.Contains(got, theirs) {
		t.Fatalf("FindByEnv = %v, want both %d and %d", got, mine, theirs)
	}
}

// TestFindByEnvOfMatchesTheRealUID: FindByEnvOf goes by a process's real
// uid alone. A process of uid's that runs with root's effective uid (as one
// running a set-user-ID root program) is found for uid and not for root; a
// root process that has uid in its effective, saved and filesystem slots
// (as one running uid's set-user-ID program, or a root daemon acting for
// uid) is found for root and not for uid: it is not uid's, and its
// environment is not read for uid. Needs root and setpriv (util-linux), to
// start processes whose uids differ.
func TestFindByEnvOfMatchesTheRealUID(t *testing.T) {
	t.Parallel()
	if !hasProc || os.Geteuid() != 0 {
		t.Skip("needs /proc and root (to start a process with mixed uids)")
	}
	need.Tools(t, "apt-get install util-linux", "setpriv")
	const other = 65534 // nobody's, whether or not this host names it
	kv := "LOOM_PROC_TEST=" + t.Name()
	start := func(ids string) int {
		cmd := exec.Command("setpriv", ids, "--", "/bin/sleep", "60")
		cmd.Env = []string{"PATH=/usr/bin:/bin", kv}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() { _ = KillGroup(pid, syscall.SIGKILL); _ = cmd.Wait() })
		// setpriv execs sleep: wait for its ids to be set (the Uid line
		// read as they are asked) and for sleep to run.
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if bytes.HasPrefix(b, []byte("/bin/sleep\x00")) {
				return pid
			}
			if time.Now().After(deadline) {
				t.Fatalf("setpriv %s: pid %d never ran sleep (cmdline %q)", ids, pid, b)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	setuidRoot := start("--ruid=" + strconv.Itoa(other)) // Uid: 65534 0 0 0
	actingFor := start("--euid=" + strconv.Itoa(other))  // Uid: 0 65534 65534 65534
	if got := FindByEnvOf(kv, other); !slices.Equal(got, []int{setuidRoot}) {
		t.Fatalf("FindByEnvOf(uid %d) = %v, want only %d (its real uid), not %d (root's, uid %d in its other slots)",
			other, got, setuidRoot, actingFor, other)
	}
	if got := FindByEnvOf(kv, 0); !slices.Equal(got, []int{actingFor}) {
		t.Fatalf("FindByEnvOf(uid 0) = %v, want only %d (its real uid), not %d (uid %d's, root only effective)",
			got, actingFor, setuidRoot, other)
	}
}

// TestRealUID: the real uid is the Uid line's first field; a status
// without one, or with a bad one, has none.
func TestRealUID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status string
		want   int64
	}{
		{"Name:\tsleep\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n", 1000},
		{"Uid:\t0\t1000\t1000\t1000\n", 0},
		{"Name:\tsleep\nGid:\t0\t0\t0\t0\n", -1},
		{"Uid:\n", -1},
		{"Uid:\tx\t1000\n", -1},
		{"Uid:\t4294967296\t0\n", -1},
	} {
		if got := realUID([]byte(c.status)); got != c.want {
			t.Errorf("realUID(%q) = %d, want %d", c.status, got, c.want)
		}
	}
}
