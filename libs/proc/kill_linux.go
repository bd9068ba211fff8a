package proc

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalStill sends sig to pid when, as it is sent, pid is a process ours
// accepts (given its stat fields, statFields: at least four), and returns
// those fields; nil when it sent nothing. The process is pinned by a pidfd
// first and judged after, so that the signal reaches the process judged:
// were pid recycled before the pin, the fields read are the new process's,
// judged as such; were it recycled after, the pidfd still names the one
// gone, and the signal reaches nobody. Without pidfds (Linux before 5.3)
// it is judged, then signalled, microseconds apart.
func signalStill(pid int, sig syscall.Signal, ours func(f []string) bool) []string {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	f, ok := statFields(pid)
	if !ok || len(f) < 4 || !ours(f) {
		if err == nil {
			unix.Close(fd)
		}
		return nil
	}
	if err != nil {
		_ = syscall.Kill(pid, sig)
		return f
	}
	_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	unix.Close(fd)
	return f
}
