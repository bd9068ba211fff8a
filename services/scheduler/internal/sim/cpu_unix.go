//go:build unix

package sim

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used so far (user and
// system, every thread: the garbage collector's work included), or 0 where
// it cannot be read.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
