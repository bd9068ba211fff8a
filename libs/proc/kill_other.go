//go:build !linux

package proc

import "syscall"

// signalStill sends sig to pid when it is a process ours accepts (given
// its stat fields, statFields), and returns those fields; nil when it sent
// nothing. Without /proc (statFields has nothing) it sends nothing.
func signalStill(pid int, sig syscall.Signal, ours func(f []string) bool) []string {
	f, ok := statFields(pid)
	if !ok || len(f) < 4 || !ours(f) {
		return nil
	}
	_ = syscall.Kill(pid, sig)
	return f
}
