package proc

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A helper, run as this test binary started again: it starts sleep in a
// process group of its own (as a shell with job control starts a job),
// prints its pid, and waits.
func TestHelperSessionLeader(t *testing.T) {
	if os.Getenv("PROC_TEST_SESSION_LEADER") != "1" {
		t.Skip("a helper process, not a test")
	}
	c := exec.Command("sleep", "1000")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		os.Exit(2)
	}
	os.Stdout.WriteString(strconv.Itoa(c.Process.Pid) + "\n")
	_ = c.Wait()
	os.Exit(0)
}

// TestKillGroupReachesItsSession: a group whose leader leads a session (a
// step with a terminal) is killed with the session's other groups, and
// their usage counts as the group's.
func TestKillGroupReachesItsSession(t *testing.T) {
	t.Parallel()
	leader := exec.Command(os.Args[0], "-test.run=^TestHelperSessionLeader$")
	leader.Env = append(os.Environ(), "PROC_TEST_SESSION_LEADER=1")
	leader.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-leader.Process.Pid, syscall.SIGKILL); _ = leader.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the helper's child: %v", err)
	}
	child, _ := strconv.Atoi(line[:len(line)-1])
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if f, ok := statFields(child); !ok || f[2] == strconv.Itoa(leader.Process.Pid) {
		t.Fatalf("the child %d is in its leader's group: %v", child, f)
	}
	if u := GroupUsage(map[int]bool{leader.Process.Pid: true}, false); u[leader.Process.Pid].Processes != 1 {
		t.Errorf("usage of the session's group: %+v, want the child in its own group counted", u)
	}
	if err := KillGroup(leader.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !WaitGone(10*time.Second, func() bool { return !Alive(child, 0) || isZombie(child) }) {
		t.Fatalf("child %d in another group of the session outlived KillGroup", child)
	}
}

// isZombie reports whether pid has exited and waits for its parent.
func isZombie(pid int) bool {
	f, ok := statFields(pid)
	return ok && len(f) > 0 && f[0] == "Z"
}
