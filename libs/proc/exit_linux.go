package proc

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// AwaitExit returns once pid, a child of this process, has exited, leaving
// it unreaped: the caller's (*os.Process).Wait reaps it, at once.
//
// Wait alone blocks a thread in waitid for the child's whole life, and the Go
// runtime hands that thread's processor to another thread (sysmon wakes
// every 20 µs to do so while any goroutine sits in a syscall). An agent with
// dozens of short jobs paid for that on every one: waiting here instead, on
// a pidfd through the network poller, cut its own CPU per job by about a
// sixth (bench/REPORT.md). It returns an error, having waited for nothing,
// where pidfds are missing (Linux before 5.10); Wait then blocks as before.
func AwaitExit(pid int) error {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	var werr error
	if err := rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		// WNOWAIT leaves the child to Wait; with WNOHANG and no exit yet,
		// Linux zeroes info.
		if err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
			werr = err
			return true
		}
		return info.Signo != 0
	}); err != nil {
		return fmt.Errorf("await %d: %w", pid, err)
	}
	if werr != nil {
		return fmt.Errorf("await %d: %w", pid, werr)
	}
	return nil
}
