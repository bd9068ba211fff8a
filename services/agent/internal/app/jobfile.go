package app

import (
	"os"
	"path/filepath"
	"syscall"
)

// openJobFile opens path, a file a job writes for the agent to read (its
// run's progress file, its metrics file, its TensorBoard event files),
// when the agent may read it, else returns nil. The agent reads as root,
// in directories the job's owner writes, so it takes only the owner's own
// file: a regular file (a device's open can act; a FIFO has no end), not
// a link (O_NOFOLLOW: a symlink leads anywhere), with one name (a hard
// link the owner made to someone else's file, where the kernel lets them,
// has two) and owned by uid, the job's (someone else's file, whatever
// name it has there). The open never waits (O_NONBLOCK: a FIFO there
// stalled every reader of the node). The caller reads a bounded amount:
// each reader has its own bound. fi is the opened file's, as it was
// checked.
func openJobFile(path string, uid uint32) (f *os.File, fi os.FileInfo) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil
	}
	fi, err = f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !oneLink(fi) || !owned(fi, uid) {
		f.Close()
		return nil, nil
	}
	return f, fi
}

// runOwner is the owner of the directory of path, a run's file in the
// run's progress directory (its progress and metrics files): the job's
// owner. The agent made that directory for the job's owner (GiveDir, which
// refuses one that is not a directory of theirs) under parents only it
// writes, so no one else can have made or put it there, and the owner
// cannot give it away (chown is root's). It reports false where the
// directory is not there or is no directory (not through a link).
func runOwner(path string) (uint32, bool) {
	f, err := os.OpenFile(filepath.Dir(path), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// openRunFile is openJobFile for a file of the run's progress directory
// (runOwner): its progress file, its metrics file.
func openRunFile(path string) (*os.File, os.FileInfo) {
	uid, ok := runOwner(path)
	if !ok {
		return nil, nil
	}
	return openJobFile(path, uid)
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
