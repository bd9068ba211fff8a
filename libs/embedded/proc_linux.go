//go:build linux

package embedded

import "syscall"

// childAttr makes the kernel stop redis-server when this process dies, so a
// crashed test or `loom up` leaves no Redis behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
