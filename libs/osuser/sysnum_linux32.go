//go:build linux && (386 || arm)

package osuser

import "golang.org/x/sys/unix"

// The system calls that take 32-bit ids (the plain ones take 16-bit ids on
// these architectures).
const (
	sysSetgroups = unix.SYS_SETGROUPS32
	sysSetresuid = unix.SYS_SETRESUID32
	sysSetresgid = unix.SYS_SETRESGID32
)
