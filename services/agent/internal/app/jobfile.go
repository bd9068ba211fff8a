package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/loom-ml/loom/libs/osuser"
)

// openJobFileAt opens name (one component) in the directory d, a file a
// job writes for the agent to read (its run's progress file, its metrics
// file, its TensorBoard event files), when the agent may read it, else
// returns nil. The agent reads as root, in directories the job's owner
// writes, so it takes only the owner's own file: a regular file (a
// device's open can act; a FIFO has no end), not a link (O_NOFOLLOW: a
// symlink leads anywhere), with one name (a hard link the owner made to
// someone else's file, where the kernel lets them, has two) and owned by
// uid, the job's (someone else's file, whatever name it has there). It is
// opened relative to d (openat), so it is the one in the directory the
// caller checked, whatever d's path leads to by now. The open never waits
// (O_NONBLOCK: a FIFO there stalled every reader of the node). The caller
// reads a bounded amount: each reader has its own bound. fi is the opened
// file's, as it was checked.
func openJobFileAt(d *os.File, name string, uid uint32) (f *os.File, fi os.FileInfo) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil
	}
	return checkJobFile(os.NewFile(uintptr(fd), filepath.Join(d.Name(), name)), uid)
}

// checkJobFile returns f and its FileInfo when f is a file the agent may
// read (openJobFileAt), else closes it and returns nil.
func checkJobFile(f *os.File, uid uint32) (*os.File, os.FileInfo) {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !oneLink(fi) || !owned(fi, uid) {
		f.Close()
		return nil, nil
	}
	return f, fi
}

// runDir opens the directory of path, a run's file in the run's progress
// directory (its progress and metrics files), and returns it with its
// owner: the job's owner. The agent made that directory for the job's
// owner (GiveDir, which refuses one that is not a directory of theirs)
// under parents only it writes, so no one else can have made or put it
// there, and the owner cannot give it away (chown is root's). It reports
// false where the directory is not there or is no directory (not through
// a link). The caller closes the directory.
func runDir(path string) (*os.File, uint32, bool) {
	f, err := openDir(filepath.Dir(path))
	if err != nil {
		return nil, 0, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		f.Close()
		return nil, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		f.Close()
		return nil, 0, false
	}
	return f, st.Uid, true
}

// openDir opens path, a directory a job may write in, as runDir starts
// from it: a directory alone (O_DIRECTORY: a device's open
// can act), not through a link (O_NOFOLLOW), never waiting (O_NONBLOCK).
func openDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// openRunFile is openJobFileAt for a file of the run's progress directory
// (runDir): its progress file, its metrics file, opened relative to the
// directory runDir checked.
func openRunFile(path string) (*os.File, os.FileInfo) {
	d, uid, ok := runDir(path)
	if !ok {
		return nil, nil
	}
	defer d.Close()
	return openJobFileAt(d, filepath.Base(path), uid)
}

// errNotJobDir is openDirIn's refusal of a component that is not a
// directory of the job's owner.
var errNotJobDir = errors.New("not a directory of the job's owner")

// errNotAbs is openPath's refusal of a path that is not absolute and clean.
var errNotAbs = errors.New("not an absolute, clean path")

// openPath opens the directory path (absolute, clean: filepath.Clean's)
// from a trusted root without following a link in any component
// (O_DIRECTORY, never waiting: O_NONBLOCK). The path is a job's (its
// TensorBoard directory) and the agent opens it as root: a path opened
// whole follows the links in every component but the last, so a job could
// name a directory through a link of its own and have root's open go where
// the link leads — through another user's directory, or through
// /proc/<pid>/root into another mount namespace, whose user ids are not
// this node's. The trusted root is root (the agent's shared directory, as
// its operator configured it: opened following links, which only the
// operator made) when path is in it, else "/". A link anywhere below it is
// refused (ELOOP, ENOTDIR): name the directory's real path.
func openPath(root, path string) (*os.File, error) {
	return openPathBy(root, path, osuser.HasOpenat2())
}

// openPathBy is openPath, in one openat2 (RESOLVE_NO_SYMLINKS: the kernel
// refuses a link in any component, at a third of the walk's cost) when
// useOpenat2 (osuser.HasOpenat2: the kernel has it, no filter refuses
// it), else by a walk: every component opened
// relative to the one before (openat) with O_NOFOLLOW.
func openPathBy(root, path string, useOpenat2 bool) (*os.File, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, errNotAbs
	}
	start, rest := "/", path[1:]
	if root != "" && filepath.IsAbs(root) {
		root = filepath.Clean(root)
		if r, err := filepath.Rel(root, path); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
			start, rest = root, r
		}
	}
	d, err := os.OpenFile(start, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if rest == "" || rest == "." {
		return d, nil
	}
	if useOpenat2 {
		fd, err := unix.Openat2(int(d.Fd()), rest, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NONBLOCK | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH,
		})
		d.Close()
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), path), nil
	}
	for _, name := range strings.Split(rest, "/") {
		if d, err = openDirAt(d, name); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// openDirAt opens name (one component, not "." nor "..") in d, a directory
// alone, not through a link, never waiting, and closes d.
func openDirAt(d *os.File, name string) (*os.File, error) {
	defer d.Close()
	if name == "" || name == "." || name == ".." {
		return nil, errNotJobDir
	}
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.Name(), name)), nil
}

// openDirIn opens rel ("" or "." for dir itself; slash-separated, no
// "..") under dir, dir opened by openPath from root (no link in it below
// the trusted root), every component from dir down opened relative to the
// one before (openat) without following a link (O_NOFOLLOW, O_DIRECTORY)
// and owned by uid. A job that lists its directory, then swaps a
// subdirectory for a link before the agent opens a file in it, has the open
// refused (ELOOP, ENOTDIR), not led elsewhere: a path opened whole resolves
// every component but the last, links included. The caller closes the
// directory.
func openDirIn(root, dir, rel string, uid uint32) (*os.File, error) {
	d, err := openPath(root, dir)
	if err != nil {
		return nil, err
	}
	if err := checkJobDir(d, uid); err != nil {
		return nil, err
	}
	if rel == "" || rel == "." {
		return d, nil
	}
	for _, name := range strings.Split(rel, "/") {
		if d, err = openDirAt(d, name); err != nil {
			return nil, err
		}
		if err := checkJobDir(d, uid); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// checkJobDir closes d unless it is a directory uid owns.
func checkJobDir(d *os.File, uid uint32) error {
	if fi, err := d.Stat(); err != nil || !fi.IsDir() || !owned(fi, uid) {
		d.Close()
		return errNotJobDir
	}
	return nil
}

// openJobFileIn is openJobFileAt for rel (a file's path relative to dir, as
// a listing of dir gave it), opened relative to its directory, itself
// opened by openDirIn from root.
func openJobFileIn(root, dir, rel string, uid uint32) (*os.File, os.FileInfo) {
	d, err := openDirIn(root, dir, filepath.Dir(rel), uid)
	if err != nil {
		return nil, nil
	}
	defer d.Close()
	return openJobFileAt(d, filepath.Base(rel), uid)
}

// sizeIn is the size of rel, a regular file under dir, looked up as
// openJobFileIn opens it (its directories opened one by one, none a link)
// but without opening it; ok is false where it is not one, or a link.
func sizeIn(root, dir, rel string, uid uint32) (size int64, ok bool) {
	d, err := openDirIn(root, dir, filepath.Dir(rel), uid)
	if err != nil {
		return 0, false
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), filepath.Base(rel), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, false
	}
	return st.Size, true
}

// oneLink reports whether fi is a file with one name.
func oneLink(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 1
}

// owned reports whether uid owns fi.
func owned(fi os.FileInfo, uid uint32) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == uid
}
