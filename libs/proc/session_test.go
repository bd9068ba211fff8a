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
// prints its pid, and waits, or with PROC_TEST_LEADER_EXIT=1 exits at once,
// leaving it.
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
	if os.Getenv("PROC_TEST_LEADER_EXIT") == "1" {
		os.Exit(0)
	}
	_ = c.Wait()
	os.Exit(0)
}

// sessionWithChild starts TestHelperSessionLeader as a session's leader
// (with exits, one that exits at once) and returns it and its child, which
// is in a group of its own in that session.
func sessionWithChild(t *testing.T, exits bool) (*exec.Cmd, int) {
	t.Helper()
	leader := exec.Command(os.Args[0], "-test.run=^TestHelperSessionLeader$")
	leader.Env = append(os.Environ(), "PROC_TEST_SESSION_LEADER=1")
	if exits {
		leader.Env = append(leader.Env, "PROC_TEST_LEADER_EXIT=1")
	}
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
	return leader, child
}

// TestKillGroupReachesItsSession: a group whose leader leads a session (a
// step with a terminal) is killed with the session's other groups, and
// their usage counts as the group's.
func TestKillGroupReachesItsSession(t *testing.T) {
	t.Parallel()
	leader, child := sessionWithChild(t, false)
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

// TestKillGroupReachesTheSessionOfALeaderGone: the agent kills a step's
// group after it has reaped the group's leader (the shell of srun --pty
// exited): what the shell left running in groups of their own in its
// session (sleep &) is killed as well.
func TestKillGroupReachesTheSessionOfALeaderGone(t *testing.T) {
	t.Parallel()
	leader, child := sessionWithChild(t, true)
	if err := leader.Wait(); err != nil {
		t.Fatalf("the leader: %v", err)
	}
	if Alive(leader.Process.Pid, 0) || !Alive(child, 0) {
		t.Fatalf("leader %d alive %v, child %d alive %v", leader.Process.Pid, Alive(leader.Process.Pid, 0), child, Alive(child, 0))
	}
	if err := KillGroup(leader.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !WaitGone(10*time.Second, func() bool { return !Alive(child, 0) || isZombie(child) }) {
		t.Fatalf("child %d in the session of a reaped leader outlived KillGroup", child)
	}
}

// isZombie reports whether pid has exited and waits for its parent.
func isZombie(pid int) bool {
	f, ok := statFields(pid)
	return ok && len(f) > 0 && f[0] == "Z"
}
