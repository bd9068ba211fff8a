package stall

import (
	"os"
	"strconv"
	"strings"
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
