package stall

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// TestStartStallsEnvironmentReads: a read of the helper's environment
// waits while it lives and ends once it is killed.
func TestStartStallsEnvironmentReads(t *testing.T) {
	t.Parallel()
	pid := Start(t)
	done := make(chan error, 1)
	go func() { _, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("read of pid %d's environment ended (%v): want it blocked while the helper lives", pid, err)
	case <-time.After(time.Second):
	}
	p, _ := os.FindProcess(pid)
	_ = p.Kill()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("read of pid %d's environment still blocked 30s after the helper was killed", pid)
	}
}

// TestStartAsIsTheUsersProcess: StartAs's helper is a process of uid (its
// real uid, as /proc/<pid>/status says it), and its environment read still
// blocks.
func TestStartAsIsTheUsersProcess(t *testing.T) {
	t.Parallel()
	const uid = 65534 // nobody's, whether or not this host names it
	pid := StartAs(t, uid)
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := "\nUid:\t65534\t65534\t65534\t65534\n"
	if !strings.Contains(string(st), want) {
		t.Fatalf("pid %d's status has no %q: it is not uid %d's process\n%s", pid, want, uid, st)
	}
	done := make(chan error, 1)
	go func() { _, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("read of pid %d's environment ended (%v): want it blocked while the helper lives", pid, err)
	case <-time.After(200 * time.Millisecond):
	}
}

// orphanEnv, in TestHelperOutlivesNoTest's child, has it start a helper
// and wait to be killed.
const orphanEnv = "LOOM_TESTKIT_STALL_ORPHAN"

// TestHelperOutlivesNoTest: a test binary that ends without its cleanups
// (killed, or a -timeout's panic) takes its helper with it, and so the
// reader its helper's FUSE connection holds in an uninterruptible wait:
// neither is left behind on the machine, whoever the helper runs as.
func TestHelperOutlivesNoTest(t *testing.T) {
	if uid, ok := os.LookupEnv(orphanEnv); ok {
		n, _ := strconv.Atoi(uid)
		var pid int
		if n < 0 {
			pid = Start(t)
		} else {
			pid = StartAs(t, uint32(n))
		}
		fmt.Printf("helper %d\n", pid)
		time.Sleep(time.Hour) // until killed: its cleanups never run
	}
	t.Parallel()
	for _, uid := range []int{-1, 65534} {
		t.Run(fmt.Sprintf("uid %d", uid), func(t *testing.T) {
			t.Parallel()
			orphanedHelperEnds(t, uid)
		})
	}
}

// orphanedHelperEnds starts a test binary that starts a helper (as uid,
// where not -1), kills that binary, and waits for the helper and its
// reader to end.
func orphanedHelperEnds(t *testing.T, uid int) {
	if os.Geteuid() != 0 {
		t.Skip("the helper needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("the helper needs FUSE: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOutlivesNoTest$")
	// Its TMPDIR is this test's: the child is killed before its own
	// cleanups can remove the directories its helper mounted on.
	cmd.Env = append(os.Environ(), orphanEnv+"="+strconv.Itoa(uid), "TMPDIR="+t.TempDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		for {
			s, err := r.ReadString('\n')
			if strings.HasPrefix(s, "helper ") || err != nil {
				line <- s
				return
			}
		}
	}()
	var s string
	select {
	case s = <-line:
	case <-time.After(60 * time.Second):
		t.Fatal("no helper started after 60s")
	}
	if !strings.HasPrefix(s, "helper ") {
		t.Skipf("the child started no helper (%q): it cannot run here", s)
	}
	// Its children, the helper and the reader, pinned (pidfds) while
	// their parent still holds them unreaped, so that a kill at cleanup
	// (where the test fails) reaches them and nobody else.
	var kids []*os.Process
	for _, task := range must(filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid))) {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			p, err := os.FindProcess(pid)
			if err != nil {
				t.Fatal(err)
			}
			kids = append(kids, p)
			t.Cleanup(func() { _ = p.Kill() })
		}
	}
	if len(kids) != 2 {
		t.Fatalf("the child has %d children, want 2 (the helper and its reader)", len(kids))
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range kids {
		for !gone(p) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still runs 30s after the test binary that started it was killed (%s): left behind",
					p.Pid, state(p.Pid))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// gone reports whether p has ended (exited, reaped or not).
func gone(p *os.Process) bool {
	if p.Signal(syscall.Signal(0)) != nil {
		return true
	}
	return strings.HasPrefix(state(p.Pid), "Z")
}

// state is pid's state, as its stat says it.
func state(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return string(b[i+2:])[:1]
	}
	return "gone"
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
