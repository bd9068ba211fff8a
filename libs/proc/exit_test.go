package proc

import (
	"io"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// TestAwaitExit: it waits while the child runs, returns once it has
// exited, and leaves it for Wait to reap with its exit status.
func TestAwaitExit(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("pidfds are Linux only")
	}
	cmd := exec.Command("/bin/sh", "-c", "read x; exit 3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	done := make(chan error, 1)
	go func() { done <- AwaitExit(cmd.Process.Pid) }()
	// The child waits for its input: AwaitExit must not have returned. (A
	// wrong answer shows up here at once or, at worst, in a later run.)
	select {
	case err := <-done:
		t.Fatalf("AwaitExit returned %v while the child still ran", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("AwaitExit = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitExit did not return after the child exited")
	}
	// Not reaped: Wait gets the status.
	if err := cmd.Wait(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("Wait after AwaitExit = %v, state %v; want exit status 3", err, cmd.ProcessState)
	}
	// An exited and reaped child, or no such process: an error at once.
	if err := AwaitExit(cmd.Process.Pid); err == nil {
		t.Fatal("AwaitExit of a reaped child succeeded")
	}
}

// TestAwaitExitOfAChildThatAlreadyExited: an exit before the call is not
// missed (the poller reports the pidfd readable at once).
func TestAwaitExitOfAChildThatAlreadyExited(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("pidfds are Linux only")
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// A zombie until reaped: wait until /proc says it is no longer running.
	if !WaitGone(10*time.Second, func() bool { _, alive := StartTime(pid); return !alive }) {
		t.Fatal("/bin/true did not exit")
	}
	done := make(chan error, 1)
	go func() { done <- AwaitExit(pid) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("AwaitExit = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitExit missed an exit that came before it")
	}
	if err := cmd.Wait(); err != nil || cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("Wait = %v", err)
	}
}

// TestWait: Wait returns once the child has exited, with its status.
func TestWait(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("/bin/sh", "-c", "exit 4")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := Wait(cmd); err == nil || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 4 {
		t.Fatalf("Wait = %v, state %v; want exit status 4", err, cmd.ProcessState)
	}
}
