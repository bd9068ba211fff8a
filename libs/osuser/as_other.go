//go:build !linux

package osuser

import (
	"fmt"
	"os"
)

// As runs fn as the account a (see the Linux version): where a thread
// cannot take on another identity alone, only this process's own account
// is supported.
func As(a Account, fn func() error) error {
	if IsSelf(a) {
		return fn()
	}
	return fmt.Errorf("act as %s: not supported on this system: %w", a, ErrNotPermitted)
}

// renameNoReplace renames from to to unless to exists (an error wrapping
// os.ErrExist then); where there is no atomic way, checked first.
func renameNoReplace(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: os.ErrExist}
	}
	return os.Rename(from, to)
}
