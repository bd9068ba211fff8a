//go:build !linux

package osuser

import "fmt"

// As runs fn as the account a (see the Linux version): where a thread
// cannot take on another identity alone, only this process's own account
// is supported.
func As(a Account, fn func() error) error {
	if IsSelf(a) {
		return fn()
	}
	return fmt.Errorf("act as %s: not supported on this system: %w", a, ErrNotPermitted)
}
