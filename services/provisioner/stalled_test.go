package provisioner

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit/stall"
)

// TestAgentsLookIsNotHeldUpByAStalledProcess: a process on the machine
// whose environment read blocks (a real one, holding its memory map lock:
// stall.Start, as libs/proc's and the agent's tests start beside this
// package's in `make test`) does not hold up the tests' look for a node's
// agents, which reads every process's environment: the look ends within
// proc's bound and finds the process carrying the node's entries.
func TestAgentsLookIsNotHeldUpByAStalledProcess(t *testing.T) {
	t.Parallel()
	node := "stalled-" + strconv.Itoa(os.Getpid())
	kv := []string{"LOOM_NODE=" + node, "LOOM_TEST_RUN_AGENT=1"}
	stalled := stall.Start(t, kv...)
	cmd := exec.Command("/bin/sleep", "60")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, kv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	done := make(chan []int, 1)
	go func() { done <- agents(t, node) }()
	// The look's bound is about a second (proc: execWait + lookBound); far
	// past it, a look that waits on the stalled read waits until the
	// helper is killed, at cleanup.
	const bound = 10 * time.Second
	select {
	case got := <-done:
		if !slices.Equal(got, []int{cmd.Process.Pid}) {
			t.Fatalf("agents(%q) = %v, want [%d] (the sleep; not %d, whose environment cannot be read)", node, got, cmd.Process.Pid, stalled)
		}
	case <-time.After(bound):
		t.Fatalf("agents(%q) still blocked after %v: it waits on pid %d's environment read, which never ends", node, bound, stalled)
	}
}
