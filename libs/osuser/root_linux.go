//go:build linux

package osuser

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenRoot is os.OpenRoot for a directory a caller named and that is read
// on their behalf (As): it refuses one reached through a /proc "magic"
// link (/proc/self/fd/N, /proc/<pid>/cwd or root, or a link to one). As
// changes a thread's identity, not its process, and the kernel lets a
// process follow its own descriptors whoever it acts as: through such a
// link the caller's thread would reach any directory the service holds
// open (another caller's, being read for them), past the directories
// above it that keep the caller out. dir is opened again with openat2's
// RESOLVE_NO_MAGICLINKS and must be the directory the root holds (the
// same device and inode: not one swapped in between). Where the kernel
// has no openat2 (before Linux 5.6) it is os.OpenRoot.
func OpenRoot(dir string) (*os.Root, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if err := notThroughProc(dir, root); err != nil {
		root.Close()
		return nil, &fs.PathError{Op: "openroot", Path: dir, Err: err}
	}
	return root, nil
}

// ErrThroughProc is returned (wrapped in an fs.PathError) by OpenRoot,
// OpenNoProcLinks and OpenFile for a path reached through a /proc link,
// so that a caller can tell that refusal from a missing file or a denied
// one (errors.Is).
var ErrThroughProc = errors.New("reached through a /proc link (a process's descriptor, cwd or root: it can lead where the account cannot go), or through too many links: refused")

// OpenNoProcLinks is os.OpenFile refusing a path through a /proc link
// (ErrThroughProc): openat2's RESOLVE_NO_MAGICLINKS, where the kernel has
// it, else os.OpenFile. It is OpenFile's open, for a caller already
// inside As (one that does more than open as the account).
func OpenNoProcLinks(path string, flag int, perm os.FileMode) (*os.File, error) {
	how := &unix.OpenHow{Flags: uint64(flag) | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if flag&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		// openat2 refuses a mode with nothing to create (EINVAL).
		how.Mode = uint64(syscallMode(perm))
	}
	if !HasOpenat2() {
		return os.OpenFile(path, flag, perm)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, how)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, &fs.PathError{Op: "open", Path: path, Err: ErrThroughProc}
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// syscallMode is os.OpenFile's translation of perm for open(2): the
// permission bits and setuid, setgid and sticky.
func syscallMode(perm os.FileMode) uint32 {
	m := uint32(perm.Perm())
	if perm&os.ModeSetuid != 0 {
		m |= syscall.S_ISUID
	}
	if perm&os.ModeSetgid != 0 {
		m |= syscall.S_ISGID
	}
	if perm&os.ModeSticky != 0 {
		m |= syscall.S_ISVTX
	}
	return m
}

func notThroughProc(dir string, root *os.Root) error {
	if !HasOpenat2() {
		return nil
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return ErrThroughProc
	case err != nil:
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	fi, err := root.Stat(".")
	if err != nil {
		return err
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); !ok || sys.Dev != st.Dev || sys.Ino != st.Ino {
		return fmt.Errorf("changed while it was opened (a link replaced?): refused")
	}
	return nil
}

// HasOpenat2 reports whether this process may use openat2 (Linux 5.6 and
// later, not refused by a seccomp filter: ENOSYS where the kernel lacks
// it, EPERM or EINVAL where a filter refuses it), probed once on "/". One
// answer for every caller, so that a filtered openat2 is never mistaken for
// a refusal of the path: those who need its RESOLVE_* guarantees fall back
// to what they did without it (a plain open, or a walk with O_NOFOLLOW).
var HasOpenat2 = sync.OnceValue(func() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})
