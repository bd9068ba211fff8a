//go:build linux

package osuser

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// As runs fn with the file-system identity of the account a: the uid, gid
// and supplementary groups the kernel checks when fn opens, creates or
// reads a file, so that fn can do no more than a process of a could. A
// file fn creates is a's.
//
// When this process already is a (IsSelf) fn just runs. Otherwise this
// process must run as root (else the error wraps ErrNotPermitted): fn runs
// on an OS thread of its own that takes on a's groups, effective gid and
// effective uid with raw system calls, which on Linux change the calling
// thread only (the Go runtime's own wrappers change every thread). Its
// saved uid stays 0, so the thread can become root again; while it is a,
// the kernel has cleared its effective capabilities, as for any process
// whose effective uid leaves 0 (capabilities(7)), so CAP_DAC_OVERRIDE and
// the rest do not apply. Threads the runtime makes meanwhile are not cloned
// from it (the runtime makes new threads from a clean template thread while
// the current one is locked). A thread whose identity could not be
// restored is never used again: it ends with fn's goroutine.
//
// fn must not start goroutines that expect a's identity: they run on
// other threads.
func As(a Account, fn func() error) error {
	if IsSelf(a) {
		return fn()
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("act as %s: this process runs as uid %d, not root: %w", a, os.Geteuid(), ErrNotPermitted)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			// Unlocking hands the thread back to the scheduler; a thread
			// left locked ends with this goroutine.
			if restored {
				runtime.UnlockOSThread()
			}
		}()
		groups, err := unix.Getgroups()
		if err != nil {
			restored = true
			done <- fmt.Errorf("act as %s: read groups: %w", a, err)
			return
		}
		egid := uint32(unix.Getegid())
		if err := become(a.Groups, a.GID, a.UID); err != nil {
			restored = restore(groups, egid) == nil
			done <- fmt.Errorf("act as %s: %w", a, err)
			return
		}
		ferr := fn()
		if err := restore(groups, egid); err != nil {
			done <- fmt.Errorf("act as %s: restore the thread's identity: %w", a, err)
			return
		}
		restored = true
		done <- ferr
	}()
	return <-done
}

// become sets the calling thread's supplementary groups, effective gid and
// effective uid, in that order (the last one drops the right to the
// others). Real and saved ids stay.
func become(groups []uint32, gid, uid uint32) error {
	if err := setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if _, _, e := unix.RawSyscall(sysSetresgid, keep, uintptr(gid), keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(sysSetresuid, keep, uintptr(uid), keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	return nil
}

// restore makes the calling thread root again (allowed: its saved uid is
// 0) with its former effective gid and groups.
func restore(groups []int, egid uint32) error {
	if _, _, e := unix.RawSyscall(sysSetresuid, keep, 0, keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	if _, _, e := unix.RawSyscall(sysSetresgid, keep, uintptr(egid), keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	if err := setgroups(gs); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	return nil
}

// keep is -1 as an id argument: "leave this id as it is".
const keep = ^uintptr(0)

// setgroups sets the calling thread's supplementary groups.
func setgroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(sysSetgroups, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return e
	}
	return nil
}

// renameNoReplace renames from to to unless to exists (an error wrapping
// os.ErrExist then). Where the file system cannot (no RENAME_NOREPLACE),
// a plain rename: for a new, empty directory it replaces at most another
// such empty directory, which is as good.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: os.ErrExist}
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		if err := os.Rename(from, to); err != nil {
			if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
				return &os.LinkError{Op: "rename", Old: from, New: to, Err: os.ErrExist}
			}
			return err
		}
		return nil
	}
	return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
}
