package embedded

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockPort takes, without waiting, an open-file-description write lock on
// port's byte of f: held until f is closed, by this process only.
func lockPort(f *os.File, port int) bool {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) == nil
}

func unlockPort(f *os.File, port int) {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: int64(port), Len: 1}
	_ = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}
