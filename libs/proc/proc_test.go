package proc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// TestFindByEnvOfReadsOneProcess: the uid check and the environment read
// are of the same process, even when its pid names another process between
// them. Forcing the kernel to reuse a pid is not in a test's hands, so a
// stand-in for /proc is: between the two reads (checked), a process of
// uid's without the entry is replaced, under the same pid, by another
// user's that holds it. That one is not found: the read goes through the
// directory the uid check opened. A process of uid's with the entry, left
// in place, is found (the stand-in reads as /proc would).
func TestFindByEnvOfReadsOneProcess(t *testing.T) {
	t.Parallel()
	const uid, other = 1000, 1001
	kv := "LOOM_PROC_TEST=" + t.Name()
	root := t.TempDir()
	// Pids past the kernel's pid_max (2^22): never this test's own.
	const reused, kept = 9000001, 9000002
	fake := func(dir string, pid, uid int, env ...string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string]string{
			"status":  "Name:\tsleep\nState:\tS (sleeping)\nUid:\t" + strconv.Itoa(uid) + "\t" + strconv.Itoa(uid) + "\t" + strconv.Itoa(uid) + "\t" + strconv.Itoa(uid) + "\n",
			"environ": strings.Join(append(env, ""), "\x00"),
			"cmdline": "sleep\x0060\x00",
			"stat": strconv.Itoa(pid) + " (sleep) S 1 " + strconv.Itoa(pid) + " " + strconv.Itoa(pid) +
				" 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 123456 8192 100 18446744073709551615\n",
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := func(pid int) string { return filepath.Join(root, strconv.Itoa(pid)) }
	fake(dir(reused), reused, uid, "PATH=/bin")
	fake(dir(kept), kept, uid, "PATH=/bin", kv)
	swapped := false
	checked := func(pid int) {
		if pid != reused || swapped {
			return
		}
		swapped = true
		// The process ended and another user's took its pid.
		if err := os.Rename(dir(reused), dir(reused)+".gone"); err != nil {
			t.Fatal(err)
		}
		fake(dir(reused), reused, other, "PATH=/bin", kv)
	}
	got := findByEnvIn(root, kv, uid, checked).Found
	if !swapped {
		t.Fatalf("the uid check never passed pid %d: the stand-in for /proc is not read as /proc", reused)
	}
	if !slices.Equal(got, []int{kept}) {
		t.Fatalf("findByEnvIn(uid %d) = %v, want only %d: pid %d's environment was read from uid %d's process that took the pid after the uid check",
			uid, got, kept, reused, other)
	}
}
