package testkit

import (
	"os"
	"syscall"
	"testing"
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
