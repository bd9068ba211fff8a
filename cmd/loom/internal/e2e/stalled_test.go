package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit/stall"
)

// TestServicePIDIsNotHeldUpByAStalledProcess: a process on the machine
// whose command line read blocks (a real one, holding its memory map lock:
// stall.Start, as libs/proc's and the agent's tests start beside this
// package's in `make test`) does not hold up the look for a service's
// process, which walks every process: the look finds the process running
// the binary with the address, without reading the stalled one.
func TestServicePIDIsNotHeldUpByAStalledProcess(t *testing.T) {
	t.Parallel()
	stalled := stall.Start(t)
	// A shell stands in for a service's binary: it waits for its sleep
	// (two commands: not replaced by it), and keeps the address among its
	// arguments ($0 of the script).
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skipf("no /bin/sh: %v", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(os.Getpid())
	cmd := &exec.Cmd{Path: sh, Args: []string{sh, "-c", "sleep 60; :", "-grpc-addr=" + addr}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })

	type found struct {
		pid int
		ok  bool
	}
	done := make(chan found, 1)
	go func() { pid, ok := pidServing(sh, addr); done <- found{pid, ok} }()
	// Far past a walk of the machine's processes: one that waits on the
	// stalled read waits until the helper is killed, at cleanup.
	const bound = 10 * time.Second
	select {
	case got := <-done:
		if !got.ok || got.pid != cmd.Process.Pid {
			t.Fatalf("pidServing(%s, %s) = %d, %v; want %d (the shell; not %d)", sh, addr, got.pid, got.ok, cmd.Process.Pid, stalled)
		}
	case <-time.After(bound):
		t.Fatalf("pidServing still blocked after %v: it waits on pid %d's command line read, which never ends", bound, stalled)
	}
}
