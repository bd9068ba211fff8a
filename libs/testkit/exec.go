package testkit

import (
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/libs/proc"
)

// WriteExecutable writes data to path with mode perm (an executable a
// test then runs), with no process forked while the file is open for
// writing. A child forked in that window (by a parallel test) would hold
// the write descriptor until its own exec, and running the file then
// fails with "text file busy" (ETXTBSY; Go issue 22315).
func WriteExecutable(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	syscall.ForkLock.Lock()
	err := os.WriteFile(path, data, perm)
	syscall.ForkLock.Unlock()
	if err != nil {
		t.Fatalf("testkit: write %s: %v", path, err)
	}
}

// ProcessesIn lists the pids of the live processes (as proc.Alive says)
// whose working directory is dir. A test whose job detaches processes
// (setsid, a double fork) finds them this way, since they are no longer
// under the process it started: it starts them in a directory of its own
// and checks, or kills, what still works there. Processes it may not
// inspect are left out.
func ProcessesIn(dir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dir {
			if pid, err := strconv.Atoi(e.Name()); err == nil && proc.Alive(pid, 0) {
				out = append(out, pid)
			}
		}
	}
	return out
}
