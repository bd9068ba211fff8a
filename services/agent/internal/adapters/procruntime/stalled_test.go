package procruntime

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit/stall"
	"github.com/loom-ml/loom/services/agent/internal/ports"
)

// TestAdoptIsNotHeldUpByAStalledProcess: a process of the owner's whose
// environment read blocks (a real one, holding its memory map lock:
// stall.Start) does not hold up an agent's restart. Adopting another step
// of the same owner on the node ends within the look's bound and finds
// that step's group.
func TestAdoptIsNotHeldUpByAStalledProcess(t *testing.T) {
	t.Parallel()
	marker := "LOOM_STEP_ID=" + t.Name() + "#" + strconv.Itoa(os.Getpid())
	stalled := stall.Start(t, marker+"-stalling")
	dir := t.TempDir()
	stdout, stderr := outputs(t, dir)
	rt := New(asAgent)
	want := start(t, rt, ports.Spec{Argv: []string{"sleep", "60"}, Env: []string{"PATH=/usr/bin:/bin", marker},
		Dir: dir, Stdout: stdout, Stderr: stderr}).Group()

	uid := uint32(os.Geteuid()) // the stalled process's, and the step's
	done := make(chan []ports.Group, 1)
	began := time.Now()
	go func() { done <- New(asAgent).Adopt(marker, &uid, nil) }()
	// The bound is about a second (proc: execWait + lookBound); far past
	// it, a look that waits on the stalled read waits until the helper is
	// killed, at cleanup.
	const bound = 10 * time.Second
	select {
	case got := <-done:
		t.Logf("Adopt took %v", time.Since(began))
		if !slices.Equal(got, []ports.Group{want}) {
			t.Fatalf("Adopt = %+v, want only %+v", got, want)
		}
	case <-time.After(bound):
		t.Fatalf("Adopt still blocked after %v: it waits on pid %d's environment read, which never ends", bound, stalled)
	}
}

// TestUsageIsNotHeldUpByAStalledProcess: a step's process whose
// smaps_rollup read blocks (stall.Start: the group's leader here, as
// without a shim) does not hold up the agent's usage sample, which its
// progress look takes: the sample ends within its bound, and still counts
// the process (from its stat), saying that its PSS is its RSS.
func TestUsageIsNotHeldUpByAStalledProcess(t *testing.T) {
	t.Parallel()
	stalled := stall.Start(t)
	g := ports.Group{PID: stalled}
	done := make(chan map[ports.Group]ports.Sample, 1)
	began := time.Now()
	go func() { done <- New(asAgent).Usage([]ports.Group{g}) }()
	// The bound is about a second (proc's lookBound); far past it, a
	// sample that waits on the stalled read waits until the helper is
	// killed, at cleanup.
	const bound = 10 * time.Second
	select {
	case got := <-done:
		t.Logf("Usage took %v: %+v", time.Since(began), got[g])
		if s := got[g]; s.RSS <= 0 || s.PSS != s.RSS || s.Unread != 1 {
			t.Fatalf("Usage = %+v, want group %d's one process counted, its PSS taken to be its RSS, and said unread (domain.JudgeMemory)", got, stalled)
		}
	case <-time.After(bound):
		t.Fatalf("Usage still blocked after %v: it waits on pid %d's smaps_rollup read, which never ends", bound, stalled)
	}
}
