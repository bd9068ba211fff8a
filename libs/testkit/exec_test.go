package testkit

import (
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestProcessesIn: a process started in a directory is listed under it
// (and under no other directory) while it lives, and not once it is
// gone.
func TestProcessesIn(t *testing.T) {
	t.Parallel()
	dir, other := t.TempDir(), t.TempDir()
	c := exec.Command("sleep", "1000")
	c.Dir = dir
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	pid := c.Process.Pid
	WaitFor(t, 10*time.Second, "the process listed in its directory", func() (bool, error) {
		return slices.Contains(ProcessesIn(dir), pid), nil
	})
	if got := ProcessesIn(other); len(got) != 0 {
		t.Fatalf("ProcessesIn(%s) = %v, want none", other, got)
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	if got := ProcessesIn(dir); slices.Contains(got, pid) {
		t.Fatalf("ProcessesIn(%s) = %v after %d ended", dir, got, pid)
	}
}
