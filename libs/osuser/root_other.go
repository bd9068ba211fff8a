//go:build !linux

package osuser

import (
	"errors"
	"os"
)

// OpenRoot is os.OpenRoot: only Linux has /proc's magic links to refuse
// (see the Linux version).
func OpenRoot(dir string) (*os.Root, error) { return os.OpenRoot(dir) }

// ErrThroughProc is returned (wrapped) by OpenRoot, OpenNoProcLinks and
// OpenFile for a path reached through a /proc link (Linux only: never
// here).
var ErrThroughProc = errors.New("reached through a /proc link: refused")

// OpenNoProcLinks is os.OpenFile (see the Linux version).
func OpenNoProcLinks(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag, perm)
}

// HasOpenat2 reports whether this process may use openat2: never, off
// Linux (see the Linux version).
func HasOpenat2() bool { return false }
