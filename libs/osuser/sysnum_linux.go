//go:build linux && !386 && !arm

package osuser

import "golang.org/x/sys/unix"

// The system calls that take 32-bit ids (the only ones on 64-bit Linux).
const (
	sysSetgroups = unix.SYS_SETGROUPS
	sysSetresuid = unix.SYS_SETRESUID
	sysSetresgid = unix.SYS_SETRESGID
)
